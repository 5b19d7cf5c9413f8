// Two FSDP mechanisms the meta-device oracle showed (docs/memory-model.md):
// Accelerate's fp32 upcast of a 16-bit model's trainable parameters before it
// shards them, and FSDP at ZeRO-2 (reshard_after_forward=False), which keeps
// each layer unit's unsharded parameters from its forward to its backward.
#include <doctest/doctest.h>

#include "planner/memory/model_states.h"
#include "planner/memory/fsdp_units.h"
#include "planner/predict/step_model.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_settings.h"
#include "tests/planner/fsdp_test_support.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// embeddings, two layers and a head, all trainable (a full fine-tune); in LoRA
// mode the weights are frozen and each layer gets a small trainable adapter.
constexpr int64_t kEmbed = kSmallLlm.embed;
constexpr int64_t kLayer = kSmallLlm.layer;
constexpr int64_t kHead = kSmallLlm.head;
constexpr int64_t kAdapter = int64_t{1} << 12;

graph::LayerGraph model(bool lora) { return llm_shaped(false, kSmallLlm, lora ? kAdapter : 0); }

RunSettings trainer_fsdp(Sharding sharding, TrainMode mode) {
  RunSettings settings;
  settings.stack = Stack::kHfTrainer;
  settings.precision = Precision::kBf16Pure;
  settings.mode = mode;
  settings.gpus_per_node = 2;
  settings.zero_stage = 3;
  settings.sharding = sharding;
  return settings;
}

constexpr int64_t kAll = kEmbed + 2 * kLayer + kHead;

}  // namespace

TEST_CASE("Accelerate upcasts a bf16 model's trainable parameters to fp32 shards under FSDP2 and FSDP1") {
  for (Sharding sharding : {Sharding::kFsdp2, Sharding::kFsdp1}) {
    const RunSettings settings = trainer_fsdp(sharding, TrainMode::kFull);
    CHECK(fsdp_upcasts_trainable(settings, 3));
    const ModelStates states = model_states(model(false), settings, zero_stage(3), Accounting::kAllocated);
    // fp32 shards, fp32 sharded gradients and two fp32 AdamW states, no master copy.
    CHECK(states.params == kAll * 4 / 2);
    CHECK(states.grads_full == kAll * 4 / 2);
    CHECK(states.optimizer == kAll * 8 / 2);
    CHECK(states.master == 0);
    // The all-gather stays 16-bit (MixedPrecisionPolicy.param_dtype).
    CHECK(block_gathered_bytes(model(false), settings)[1] == kLayer * 2);
    // The plan's stage decides, not the user's: the search prices ZeRO-3 under settings at 0.
    RunSettings unsharded = settings;
    unsharded.zero_stage = 0;
    CHECK(model_states(model(false), unsharded, zero_stage(3), Accounting::kAllocated).params == kAll * 4 / 2);
  }
}

TEST_CASE("no upcast without mixed precision, outside the Trainer, for frozen weights, or for FSDP2 QLoRA") {
  RunSettings no_mixed = trainer_fsdp(Sharding::kFsdp2, TrainMode::kFull);
  no_mixed.autocast = false;  // bf16=False: accelerate's mixed_precision "no"
  CHECK_FALSE(fsdp_upcasts_trainable(no_mixed, 3));
  CHECK(model_states(model(false), no_mixed, zero_stage(3), Accounting::kAllocated).params == kAll * 2 / 2);
  RunSettings torchtune = trainer_fsdp(Sharding::kFsdp2, TrainMode::kFull);
  torchtune.stack = Stack::kTorchtune;
  CHECK_FALSE(fsdp_upcasts_trainable(torchtune, 3));
  RunSettings qlora = trainer_fsdp(Sharding::kFsdp2, TrainMode::kQlora);
  CHECK_FALSE(fsdp_upcasts_trainable(qlora, 3));  // fsdp2_prepare_model: skipped with Params4bit
  qlora.sharding = Sharding::kFsdp1;
  CHECK(fsdp_upcasts_trainable(qlora, 3));
  // LoRA: the frozen bf16 weights stay bf16 shards; the fp32 adapters were fp32 already.
  const RunSettings lora = trainer_fsdp(Sharding::kFsdp2, TrainMode::kLora);
  const ModelStates states = model_states(model(true), lora, zero_stage(3), Accounting::kAllocated);
  CHECK(states.params == (kAll * 2 + 2 * kAdapter * 4) / 2);
}

TEST_CASE("FSDP at ZeRO-2 keeps each layer unsharded from its forward to its backward") {
  RunSettings settings = trainer_fsdp(Sharding::kFsdp2, TrainMode::kFull);
  settings.zero_stage = 2;
  CHECK(fsdp_shards_params(settings, 2));
  CHECK(fsdp_keeps_unsharded(settings, 2));
  RunSettings deepspeed = settings;
  deepspeed.sharding = Sharding::kDeepspeed;
  CHECK_FALSE(fsdp_shards_params(deepspeed, 2));
  const ModelStates states = model_states(model(false), settings, zero_stage(2), Accounting::kAllocated);
  // Sharded like ZeRO-3 (fp32 shards under the upcast), the root gathered all step.
  CHECK(states.params == kAll * 4 / 2);
  CHECK(states.gathered_params == (kEmbed + kHead) * 2);
  // Layer 0's forward holds its own and its all-gather output (FSDP2); layer 1's
  // forward adds its own to layer 0's; the head's backward has both.
  CHECK(states.gathered_fwd_block == std::vector<int64_t>{0, 2 * kLayer * 2, 3 * kLayer * 2, 2 * kLayer * 2});
  CHECK(states.gathered_bwd_block == std::vector<int64_t>{0, kLayer * 2, 2 * kLayer * 2, 2 * kLayer * 2});
  // FSDP1 gathers into the flat parameter itself: no second copy in forward.
  settings.sharding = Sharding::kFsdp1;
  const FsdpInFlight fsdp1 = fsdp_in_flight(model(false), settings, 2, Accounting::kAllocated);
  CHECK(fsdp1.forward == std::vector<int64_t>{0, kLayer * 2, 2 * kLayer * 2, 2 * kLayer * 2});
}

TEST_CASE("FSDP at ZeRO-3: two layers in flight in a layer, the last one alone beside the head") {
  RunSettings settings = trainer_fsdp(Sharding::kFsdp2, TrainMode::kFull);
  const FsdpInFlight fsdp2 = fsdp_in_flight(model(false), settings, 3, Accounting::kAllocated);
  // A layer: its unsharded parameters and its all-gather output (forward), the
  // previous layer prefetched (backward; the first layer, the first group after the
  // root's embeddings, has none to prefetch). The head: the last layer's all-gather
  // output in forward, the last layer prefetched at the root's pre-backward.
  CHECK(fsdp2.forward == std::vector<int64_t>{0, 2 * kLayer * 2, 2 * kLayer * 2, kLayer * 2});
  CHECK(fsdp2.backward == std::vector<int64_t>{0, kLayer * 2, 2 * kLayer * 2, kLayer * 2});
  settings.sharding = Sharding::kFsdp1;
  const FsdpInFlight fsdp1 = fsdp_in_flight(model(false), settings, 3, Accounting::kAllocated);
  CHECK(fsdp1.forward == std::vector<int64_t>{0, kLayer * 2, kLayer * 2, 0});
  // The Trainer's accelerate plugin prefetches nothing in backward (NO_PREFETCH):
  // each layer alone, none beside the head. With prefetch (Composer), the previous too.
  CHECK(fsdp1.backward == std::vector<int64_t>{0, kLayer * 2, kLayer * 2, 0});
  settings.stack = Stack::kComposer;
  const FsdpInFlight prefetched = fsdp_in_flight(model(false), settings, 3, Accounting::kAllocated);
  CHECK(prefetched.backward == std::vector<int64_t>{0, 2 * kLayer * 2, 2 * kLayer * 2, kLayer * 2});
  settings.stack = Stack::kHfTrainer;
  // The whole model one unit: nothing in flight but the root; DeepSpeed: none of this.
  settings.fsdp_wrap = FsdpWrap::kModel;
  CHECK(fsdp_in_flight(model(false), settings, 3, Accounting::kAllocated).forward.empty());
  settings.sharding = Sharding::kDeepspeed;
  settings.fsdp_wrap = FsdpWrap::kLayers;
  CHECK(fsdp_in_flight(model(false), settings, 3, Accounting::kAllocated).forward.empty());
}

TEST_CASE("FSDP at ZeRO-2 offloads nothing: its CPU offload moves parameters with the optimizer") {
  RunSettings s = trainer_fsdp(Sharding::kFsdp2, TrainMode::kFull);
  s.zero_stage = 2;
  CHECK(validate_settings(s, "t.json").is_ok());
  s.offload_optimizer = Offload::kCpu;
  CHECK(validate_settings(s, "t.json").message().find("t.json: offload_optimizer: FSDP offloads the optimizer only") == 0);
  s.sharding = Sharding::kDeepspeed;  // DeepSpeed's ZeRO-Offload at stage 2
  CHECK(validate_settings(s, "t.json").is_ok());
}

TEST_CASE("the step walk carries the layers in flight block by block") {
  StepModel step;
  step.blocks.resize(4);
  step.grads_bwd.assign(4, 0);
  step.gathered_fwd = {0, 200, 300, 200};
  step.gathered_bwd = {0, 100, 200, 200};
  const LocalPeak head = local_parts(step, 3, BlockChoice::kKeep, BlockChoice::kKeep);
  CHECK(head.backward_gathered == 200);
  CHECK(head.backward == 200);
  CHECK(local_parts(step, 2, BlockChoice::kKeep, BlockChoice::kKeep).forward == 300);
  const StepPeak peak = walk_step(step, std::vector<BlockChoice>(4, BlockChoice::kKeep), 0);
  CHECK(peak.bytes == 300);
  CHECK(peak.gathered == 300);
  CHECK(peak.transient == 0);
}

TEST_CASE("FSDP reduces a layer's gradients as its backward ends: nothing of it while the head runs") {
  const RunSettings settings = trainer_fsdp(Sharding::kFsdp2, TrainMode::kFull);
  const ModelStates states = model_states(model(false), settings, zero_stage(3), Accounting::kAllocated);
  // bf16 unsharded gradients copied into a bf16 reduce-scatter input (reduce_dtype = param_dtype).
  CHECK(states.reduce_scatter_block == std::vector<int64_t>{0, kLayer * 4, kLayer * 4, 0});
  // Of which the reduce-scatter input, a buffer; the root's reduces at the end of block 0's backward.
  CHECK(states.reduce_scatter_input_block ==
        std::vector<int64_t>{states.fsdp2_root_reduce_scatter, kLayer * 2, kLayer * 2, 0});
  RunSettings fsdp1 = settings;
  fsdp1.sharding = Sharding::kFsdp1;
  const ModelStates flat = model_states(model(false), fsdp1, zero_stage(3), Accounting::kAllocated);
  CHECK(flat.reduce_scatter_block[0] == 0);
  CHECK(flat.reduce_scatter_block[3] == 0);
  CHECK(flat.reduce_scatter_block[1] == flat.reduce_scatter_bytes);
  CHECK(flat.reduce_scatter_input_block.empty());
}

TEST_CASE("FSDP2's reduce-scatter input is a buffer at the peak and not a gradient") {
  StepModel step;
  step.blocks.resize(2);
  step.grads_bwd = {0, 300};
  step.reduce_input_bwd = {0, 100};
  const StepPeak peak = walk_step(step, std::vector<BlockChoice>(2, BlockChoice::kKeep), 0);
  CHECK(peak.bytes == 300);
  CHECK(peak.block == 1);
  CHECK(peak.gradients == 200);
  CHECK(peak.gathered == 100);
  CHECK(peak.transient == 0);
}

TEST_CASE("Llama 3.2 1B under FSDP2 peaks in the head's backward with no gradient yet, as the oracle") {
  RunSettings s = torchtune_llama_1b();
  s.stack = Stack::kTorchtitan;
  s.precision = Precision::kBf16Mixed;
  s.gpu = "h200";
  s.seq_len = 2048;
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  const Prediction p = predict_as_given(s);
  CHECK(p.where.block_name == "head");
  CHECK(p.where.phase == "backward");
  // The loss's backward runs before lm_head's gradient and after no layer's reduce-scatter.
  CHECK(p.peak.gradients == 0);
}

}  // namespace headroom::planner
