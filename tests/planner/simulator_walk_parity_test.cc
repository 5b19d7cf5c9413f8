// The step simulator prices a mechanism from the same function as the step walk, so
// that `simulate` replays the run `fit` answered for (docs/simulator.md, "Agreement
// with the planner"; bench/oracle/simulator_agreement.py measures it over the oracle grid).
#include <doctest/doctest.h>

#include <string>

#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"
#include "tests/planner/deepspeed_test_support.h"

namespace headroom::planner {
namespace {

struct Peaks {
  double walk = 0;
  double simulated = 0;
  std::string simulated_at;  // Simulation::peak_label
};

Peaks peaks(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  const GlobalConfig config = user_config(settings);
  const Prediction prediction = predict(context.value(), settings, config, choices.value(), false);
  const Simulation simulation = simulate(context.value(), settings, config, choices.value());
  const double workspace = static_cast<double>(context.value().gpu.cublas_workspace_bytes);
  // Both figures hold the cuBLAS workspace once.
  return {static_cast<double>(prediction.peak_allocated) - workspace,
          static_cast<double>(std::max(simulation.peak_allocated, simulation.first_step_peak_allocated)) - workspace,
          simulation.peak_label};
}

RunSettings trainer_bf16(const std::string& model) {
  RunSettings settings;
  settings.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/" + model;
  settings.gpu = "h200";
  settings.stack = Stack::kHfTrainer;
  settings.precision = Precision::kBf16Pure;
  settings.mode = TrainMode::kFull;
  settings.micro_batch = 1;
  settings.seq_len = 512;
  // Fused AdamW: the optimizer step's peak stays below backward's (as the oracle runs it).
  settings.optimizer_impl = OptimizerImpl::kFused;
  return settings;
}

}  // namespace

// Llama 3.2 1B ties lm_head to the embedding. At the embedding's backward (the later
// use), the first use's gradient is a transposed view the buffer cannot add into in
// place: its partial and the new sum are alive at once (BackwardGradients::
// partial_gradients). The simulator held one partial: 4.8% under the walk.
TEST_CASE("simulator and walk agree at a tied embedding's backward") {
  const Peaks p = peaks(trainer_bf16("llama-3.2-1b"));
  CHECK(p.simulated == doctest::Approx(p.walk).epsilon(0.005));
}

// DeepSpeed ZeRO-3's coordinator holds what it prefetched and what backward will use
// again beside each block (zero3_gathered_bytes), and lm_head's gradient, larger than the
// reduce bucket, stays outside it until the next hook (hold_zero3_oversized_gradients).
// The simulator gathered each block's own parameters only and held no such gradient:
// 27.8% under the walk on two Llama-3-8B layers over 8 GPUs (5.8% with the gathers alone).
TEST_CASE("simulator and walk agree on DeepSpeed ZeRO-3's gathered parameters") {
  RunSettings settings = trainer_bf16("llama-3-8b-2layers");
  settings.gpus_per_node = 8;
  settings.zero_stage = 3;
  settings.sharding = Sharding::kDeepspeed;
  const Peaks p = peaks(settings);
  CHECK(p.simulated == doctest::Approx(p.walk).epsilon(0.01));
}

// DeepSpeed ZeRO-2's hooks (deepspeed_walk.cc): the gradient partition made at the first
// reduction and freed at the step, a tied weight's first partial held to its last use, and
// lm_head's gradient (over the bucket) with its flattened copy until the next hook. The
// simulator made the partition before the step and held neither: 16.7% under the walk on
// two Llama-3-8B layers (lm_head over the bucket), 11.5% over on two Llama 3.2 1B layers
// (tied embeddings, the partition made in backward).
TEST_CASE("simulator and walk agree on DeepSpeed ZeRO-2's gradient hooks") {
  for (const std::string model : {"llama-3-8b-2layers", "llama-3.2-1b-2layers"}) {
    CAPTURE(model);
    RunSettings settings = trainer_bf16(model);
    settings.gpus_per_node = 8;
    settings.zero_stage = 2;
    settings.micro_batch = 2;
    settings.seq_len = 1024;
    const Peaks p = peaks(settings);
    CHECK(p.simulated == doctest::Approx(p.walk).epsilon(0.01));
  }
}

// PEFT's ParamWrapper on Qwen3-MoE's fused experts under ZeRO-2 (the oracle grid's
// hf-trainer[ds] experts-zero2 run): the factors' AccumulateGrad, and with it DeepSpeed's
// first hook (setup_buckets: two buckets of 5e8 bf16 elements), runs only after both of
// layers.1's grouped GEMMs have run backward (lora_factors_viewed_early). The simulator
// made the buckets after down_proj's backward, so they stood beside layers.1's gate_up
// dW' (768 MiB) and both layers' recomposed W': 16.5% over the walk and the oracle.
TEST_CASE("simulator and walk agree on ZeRO-2's first hook after ParamWrapper experts") {
  RunSettings settings = trainer_bf16("qwen3-moe-2l");
  settings.mode = TrainMode::kLora;
  settings.lora.rank = 16;
  settings.lora.dropout = 0;
  settings.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  settings.gpus_per_node = 2;
  settings.zero_stage = 2;
  const Peaks p = peaks(settings);
  CHECK(p.simulated == doctest::Approx(p.walk).epsilon(0.01));
  // Where the oracle peaks: layers.0's down_proj dW' beside the buckets and layers.0's W'.
  CHECK(p.simulated_at == "backward model.layers.0.mlp.experts.down_proj");
}

// TRL's DPO with a frozen copy as the reference (planner/predict/dpo_reference.h): the
// copy's weights resident all step and a no-grad reference forward over the same batch
// before the policy's. The simulator replayed neither: 18.5% under the walk on Llama 3.2
// 1B full fine-tuning, where the oracle agrees with the walk.
TEST_CASE("simulator and walk agree on DPO's reference copy and forward") {
  RunSettings settings = trainer_bf16("llama-3.2-1b");
  settings.recipe = Recipe::kDpo;
  settings.reference = Reference::kCopy;
  const Peaks p = peaks(settings);
  CHECK(p.simulated == doctest::Approx(p.walk).epsilon(0.01));
}

}  // namespace headroom::planner
