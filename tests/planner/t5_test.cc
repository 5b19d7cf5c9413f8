// T5 in the planner: the decoder's length (--target-seq) moves the decoder's blocks and
// not the encoder's, it is refused for other families, the run's transformers release
// decides lm_head's tie, and under bf16-amp T5LayerNorm's x.to(float32) of an fp32 input
// is x itself (docs/models.md, "T5"; modeling_t5.py 5.23.0).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "planner/predict/model_context.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

int64_t keep_of(const ModelContext& c, const std::string& block) {
  const StepProfile profile = profile_step(c.graph, c.analysis, c.compute_dtype, 2, 512, Accounting::kAllocated, c.gpu);
  return profile.blocks[block_ending(c.graph, block)].keep;
}

bool saves(const graph::LayerGraph& graph, const std::string& node, const std::string& tensor) {
  const graph::Node* n = graph.find_node(node);
  REQUIRE(n != nullptr);
  for (const graph::SavedRef& saved : n->saves) {
    if (saved.tensor == tensor) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("T5: the target length moves the decoder's kept activations, not the encoder's") {
  const Result<ModelContext> short_target = prepare_context(flan_t5_xl_lora(128));
  const Result<ModelContext> long_target = prepare_context(flan_t5_xl_lora(512));
  REQUIRE_MESSAGE(short_target.is_ok(), short_target.message());
  REQUIRE(long_target.is_ok());
  CHECK(keep_of(short_target.value(), "encoder.block.1") == keep_of(long_target.value(), "encoder.block.1"));
  CHECK(keep_of(long_target.value(), "decoder.block.1") > 3 * keep_of(short_target.value(), "decoder.block.1"));
  CHECK(predict_as_given(flan_t5_xl_lora(512)).peak_allocated > predict_as_given(flan_t5_xl_lora(128)).peak_allocated);
}

TEST_CASE("T5: target_tokens is refused for a model that is not an encoder-decoder") {
  RunSettings s = flan_t5_xl_lora(128);
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b-2layers";
  s.lora.targets = {"q_proj", "v_proj"};
  const Result<ModelContext> context = prepare_context(s);
  REQUIRE_FALSE(context.is_ok());
  CHECK(context.message().find("target_tokens: ") == 0);
  CHECK(context.message().find("expected target_tokens (--target-seq) only for a T5 model") != std::string::npos);
}

TEST_CASE("T5: transformers 5.x ties Flan-T5's lm_head to the shared embedding, 4.x reads the config") {
  RunSettings s = flan_t5_xl_lora(128);
  s.mode = TrainMode::kFull;
  const Result<ModelContext> five = prepare_context(s);
  s.versions["transformers"] = "4.44.2";
  const Result<ModelContext> four = prepare_context(s);
  REQUIRE(five.is_ok());
  REQUIRE(four.is_ok());
  CHECK(four->graph.parameter_count() - five->graph.parameter_count() == 32128 * 2048);
}

TEST_CASE("T5LayerNorm under bf16-amp keeps its fp32 input once, under pure bf16 its input and the fp32 copy") {
  RunSettings s = flan_t5_xl_lora(128);
  s.mode = TrainMode::kFull;
  const std::string norm = "encoder.block.1.layer.0.layer_norm";
  const Result<ModelContext> pure = prepare_context(s);
  s.precision = Precision::kBf16Amp;
  const Result<ModelContext> amp = prepare_context(s);
  REQUIRE(pure.is_ok());
  REQUIRE(amp.is_ok());
  CHECK(saves(pure->graph, norm, norm + ":x32"));
  CHECK(saves(pure->graph, norm, "encoder.block.0.layer.1.residual"));
  CHECK_FALSE(saves(amp->graph, norm, norm + ":x32"));
  CHECK(saves(amp->graph, norm, "encoder.block.0.layer.1.residual"));
}

TEST_CASE("T5's sublayers hold their norm's output until the module they call returns") {
  // modeling_t5.py 5.23.0: T5LayerFF.forward binds the norm's output to
  // `forwarded_states` through DenseReluDense, T5LayerSelfAttention and
  // T5LayerCrossAttention to `normed_hidden_states` through the attention.
  RunSettings s = flan_t5_xl_lora(256);
  s.mode = TrainMode::kFull;
  s.precision = Precision::kBf16Amp;
  s.micro_batch = 4;
  s.seq_len = 1024;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions["accelerate"] = "1.15.0";
  const ModelContext context = prepared_context(s);
  const auto holds = [&](const std::string& node, const std::string& tensor) {
    const graph::Node* n = context.graph.find_node(node);
    REQUIRE(n != nullptr);
    return std::find(n->holds.begin(), n->holds.end(), tensor) != n->holds.end();
  };
  CHECK(holds("encoder.block.0.layer.1.DenseReluDense.wo", "encoder.block.0.layer.1.layer_norm"));
  CHECK(holds("encoder.block.0.layer.0.SelfAttention.o", "encoder.block.0.layer.0.layer_norm"));
  CHECK(holds("decoder.block.0.layer.1.EncDecAttention.o", "decoder.block.0.layer.1.layer_norm"));
  // The oracle (hf-trainer/flan-t5-xl-2l/full/bf16-amp/non-reentrant/s1024t256/t5): 5,931,749,612
  // bytes in encoder layer 0's recompute, at the feed-forward's dropout, the fp32 [4, 1024,
  // 2048] norm output (32 MiB) still held; without the hold headroom was 48 MiB under
  // (-0.85%), with it 16 MiB (a bf16 [4, 1024, 2048] copy the oracle holds there too).
  const Prediction p = predict_as_given(s);
  CHECK(p.where.block_name == "encoder.block.0");
  const int64_t oracle = 5931749612;
  CHECK(std::abs(p.peak_allocated - p.peak.workspaces - oracle) < int64_t{17} * 1024 * 1024);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("T5 under QLoRA: the feed-forward's wo stays out of 4 bits (_keep_in_fp32_modules), wi_0 is NF4") {
  RunSettings s = flan_t5_xl_lora(128);
  s.mode = TrainMode::kQlora;
  const Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const auto weight_dtype = [&](const std::string& node) {
    const graph::Node* n = context->graph.find_node(node);
    REQUIRE(n != nullptr);
    return n->params.front().dtype;
  };
  CHECK(weight_dtype("encoder.block.0.layer.1.DenseReluDense.wi_0") == graph::DType::kNF4);
  CHECK(weight_dtype("decoder.block.1.layer.2.DenseReluDense.wo") != graph::DType::kNF4);
}

}  // namespace headroom::planner
