// ResNet-50 with BatchNorm through the planner: the note on gradient
// accumulation, buffers that never train, and a sanity check of the answer.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/predict/planner.h"
#include "planner/predict/training_notes.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

RunSettings resnet(int64_t micro_batch, int64_t grad_accum, Precision precision = Precision::kBf16Mixed) {
  RunSettings s;
  s.model = "resnet-50";
  s.gpu = "a6000";
  s.micro_batch = micro_batch;
  s.grad_accum = grad_accum;
  s.precision = precision;
  return s;
}

bool mentions_batch_norm(const std::vector<std::string>& notes) {
  return std::any_of(notes.begin(), notes.end(),
                     [](const std::string& note) { return note.find("BatchNorm") != std::string::npos; });
}

}  // namespace

TEST_CASE("fit notes BatchNorm under gradient accumulation, and only then") {
  const Result<FitAnswer> accumulating = fit(resnet(16, 4));
  REQUIRE_MESSAGE(accumulating.is_ok(), accumulating.message());
  REQUIRE(mentions_batch_norm(accumulating->warnings));
  const auto note = std::find_if(accumulating->warnings.begin(), accumulating->warnings.end(),
                                 [](const std::string& n) { return n.find("BatchNorm") != std::string::npos; });
  CHECK(note->find("the run accumulates gradients over 4 micro-batches of 16") != std::string::npos);
  CHECK(note->find("53 BatchNorm layers") != std::string::npos);
  CHECK(note->find("a batch of 64") != std::string::npos);

  const Result<FitAnswer> one_batch = fit(resnet(64, 1));
  REQUIRE(one_batch.is_ok());
  CHECK_FALSE(mentions_batch_norm(one_batch->warnings));

  // No BatchNorm, no note, whatever the accumulation.
  RunSettings llama = resnet(4, 4);
  llama.model = "tiny-llama";
  const Result<FitAnswer> no_batch_norm = fit(llama);
  REQUIRE(no_batch_norm.is_ok());
  CHECK_FALSE(mentions_batch_norm(no_batch_norm->warnings));
}

TEST_CASE("a plan that chooses accumulation over BatchNorm says so") {
  // 512 images in fp32 keep ~44 GB of activations, and the stem alone, which
  // is not checkpointed, 4 GB: on 8 GiB the search must split the batch.
  RunSettings s = resnet(512, 1, Precision::kFp32);
  s.gpu_memory_bytes = 8LL << 30;
  const Result<PlanResult> result = plan(s);
  REQUIRE_MESSAGE(result.is_ok(), result.message());
  REQUIRE(result->found);
  REQUIRE(result->best.config.grad_accum > 1);
  CHECK(mentions_batch_norm(result->warnings));
}

TEST_CASE("training_notes is empty without accumulation or without BatchNorm nodes") {
  graph::LayerGraph graph;
  graph::Node bn;
  bn.name = "bn1";
  bn.op = "batch_norm_relu";
  graph.nodes.push_back(bn);
  GlobalConfig config;
  config.micro_batch = 8;
  CHECK(training_notes(graph, config, "the run").empty());
  config.grad_accum = 2;
  CHECK(training_notes(graph, config, "the run").size() == 1);
  graph.nodes[0].op = "norm";  // LayerNorm normalizes per sample: accumulation changes nothing
  CHECK(training_notes(graph, config, "the run").empty());
}

TEST_CASE("BatchNorm buffers are stored and checkpointed but never trained") {
  for (TrainMode mode : {TrainMode::kFull, TrainMode::kLora}) {
    RunSettings s = resnet(32, 1, Precision::kFp32);
    s.mode = mode;
    const Prediction p = predict_as_given(s);
    INFO(static_cast<int>(mode));
    // LoRA (r = 16) on fc, the zoo entry's target: (2048 + 1000) x 16 adapter weights.
    const int64_t adapters = mode == TrainMode::kLora ? (2048 + 1000) * 16 : 0;
    CHECK(p.model.total_params == 25557032 + adapters);
    CHECK(p.model.trainable_params == (mode == TrainMode::kFull ? 25557032 : adapters));
    // running_mean and running_var (26,560 channels each, f32) beside the
    // parameters; num_batches_tracked stays int64: 53 x 8 bytes.
    CHECK(p.model.weight_bytes_by_dtype.at("i64") == 53 * 8);
    CHECK(p.model.weight_bytes_by_dtype.at("f32") == (25557032 + adapters + 2 * 26560) * 4);
  }
}

TEST_CASE("resnet-50 in fp32 at batch 32 is in the range people see") {
  // Sanity only, not a fitted constant: torchvision ResNet-50 training at batch
  // 32, fp32, 224 px is commonly reported at roughly 3-6 GB on the GPU (the upper
  // figures as nvidia-smi sees them, with cuDNN workspaces and the cache).
  // What autograd keeps is exact (tests/models/resnet_test.cc): 86 MB a sample.
  const Prediction p = predict_as_given(resnet(32, 1, Precision::kFp32));
  CHECK(p.peak.activations > 32 * 80'000'000LL);
  CHECK(p.peak.activations < 32 * 95'000'000LL);
  CHECK(p.peak_allocated > 2.5 * (1LL << 30));
  CHECK(p.gpu_total < 6.0 * (1LL << 30));
  // Activations scale with the batch; bf16 halves them.
  const Prediction bf16 = predict_as_given(resnet(32, 1));
  CHECK(bf16.peak.activations < p.peak.activations * 0.55);
  CHECK(bf16.peak.activations > p.peak.activations * 0.45);
}

TEST_CASE("under autocast a BatchNorm writes its input's dtype, not fp32") {
  // batch_norm is on neither autocast list: cuDNN writes the bf16 conv output's
  // dtype beside its fp32 weights. Were its output fp32, every ReLU output and
  // the next conv's cast of it would be kept too, above the fp32 run's activations.
  const Prediction amp = predict_as_given(resnet(32, 1, Precision::kBf16Amp));
  const Prediction fp32 = predict_as_given(resnet(32, 1, Precision::kFp32));
  CHECK(amp.peak.activations < fp32.peak.activations * 0.6);
}

TEST_CASE("torchvision's bottleneck frees the block's out_grad in its relu's backward") {
  // The oracle (bench/oracle grid, torch-loop[vision]/resnet-50/full/fp32/sgd/32): the
  // peak in layer4.2's backward holds two [32, 2048, 7, 7] fp32 gradients as transients
  // (24.62 MiB): ReluBackward's fresh one, which the add hands to the identity, and bn3's
  // input gradient; the out_grad ReluBackward took is gone. Three were priced (37.0 MiB).
  RunSettings s = resnet(32, 1, Precision::kFp32);
  s.gpu = "h200";
  s.stack = Stack::kTorchAmp;
  s.optimizer = OptimizerKind::kSgdMomentum;
  const Prediction p = predict_as_given(s);
  const int64_t feature_map = 32LL * 2048 * 7 * 7 * 4;  // 12,845,056 B
  CHECK(p.where.block_name == "layer4.2");
  CHECK(p.where.phase == "backward");
  MESSAGE("transient at the peak " << p.peak_as_allocated.transient << " B");
  CHECK(p.peak_as_allocated.transient >= 2 * feature_map);
  CHECK(p.peak_as_allocated.transient < 2 * feature_map + (1 << 20));
}

}  // namespace headroom::planner
