// The step simulator replays encoders and T5 as the step walk prices them (docs/simulator.md,
// "Agreement with the planner"): each case below was apart before its rule was taken from
// the walk's function, and agrees to the byte since (bench/oracle/simulator_agreement.py,
// the grid rows named in each case).
#include <doctest/doctest.h>

#include <string>

#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

struct LivePeaks {
  double walk = 0;
  double simulated = 0;  // Simulation::peak_live: live tensors, as the walk counts them
};

LivePeaks live_peaks(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  const GlobalConfig config = user_config(settings);
  const Prediction prediction = predict(context.value(), settings, config, choices.value(), false);
  const Simulation simulation = simulate(context.value(), settings, config, choices.value());
  return {static_cast<double>(prediction.peak_allocated), static_cast<double>(simulation.peak_live)};
}

// Flan-T5-XL, two layers a side, under the Trainer at B 4, S 512, T 128 (the grid's
// hf-trainer/flan-t5-xl-2l/*/s512t128/t5 rows).
RunSettings flan_t5(TrainMode mode, CheckpointPolicy checkpointing) {
  RunSettings s = flan_t5_xl_lora(128);
  s.mode = mode;
  if (mode != TrainMode::kLora) s.lora.targets.clear();
  s.micro_batch = 4;
  s.checkpointing = checkpointing;
  s.optimizer_impl = OptimizerImpl::kFused;
  return s;
}

}  // namespace

// Non-reentrant checkpointing, LoRA: the walk peaks in encoder.block.1's gated product
// backward. Three rules the simulator lacked: the fp32 gradient of the bf16 factor beside
// its cast (BackwardGradients::promoted_gradient; the node's unpacked saves die before the
// cast), the decoder embedding's leaf and the zero cross-attention bias, which their
// AccumulateGrad nodes hold to the end of backward (hold_input_grad_leaves,
// hold_t5_bias_leaves), and the encoder output, which dies after the first decoder layer's
// backward (made_persistent.h), not at the step's end. -1.7% before, 0 now.
TEST_CASE("simulator and walk agree at T5's gated feed-forward under checkpointing") {
  const LivePeaks p = live_peaks(flan_t5(TrainMode::kLora, CheckpointPolicy::kEveryBlock));
  CHECK(p.simulated == doctest::Approx(p.walk).epsilon(0.001));
}

// Without checkpointing, full fine-tuning: the walk peaks in the decoder embedding's
// backward with the encoder output's gradient waiting for its producer (crossing_gradients.h).
// The simulator made no gradient for a persistent tensor: -0.26% once the encoder output
// itself was let go at its first reader's backward.
TEST_CASE("simulator and walk agree on T5's encoder output gradient") {
  const LivePeaks p = live_peaks(flan_t5(TrainMode::kFull, CheckpointPolicy::kNone));
  CHECK(p.simulated == doctest::Approx(p.walk).epsilon(0.001));
}

// A reentrant checkpoint's CheckpointFunction.backward keeps the gradients it was handed
// to its block's end (BackwardGradients::of_reentrant_block); the pre-norm residual hands
// it on as is (gradient_is_out_grad). The simulator let it go at the block's last add:
// CLIP ViT-B/32 LoRA at B 32 (grid row hf-trainer/clip-vit-base-patch32/lora/bf16/reentrant/32)
// was 0.48% under, 0 now.
TEST_CASE("simulator and walk agree under a reentrant checkpoint's held out_grads") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/clip-vit-base-patch32";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 32;
  s.resolution = 224;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlockReentrant;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  const LivePeaks p = live_peaks(s);
  CHECK(p.simulated == doctest::Approx(p.walk).epsilon(0.001));
}

}  // namespace headroom::planner
