// FSDP gradient accumulation under no_sync (planner/memory/model_states.h,
// accumulates_unsharded): which stacks do it, the unsharded gradients each unit
// keeps between micro-steps, and one reduce-scatter a step. Read from torch 2.11
// (_runtime_utils.py _post_backward_hook, _flat_param.py, _fsdp_param.py),
// transformers' Trainer and Accelerate; docs/memory-model.md.
#include <doctest/doctest.h>

#include <string>

#include "planner/settings/hardware.h"
#include "planner/predict/model_context.h"
#include "planner/memory/model_states.h"
#include "planner/predict/simulator.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_settings.h"
#include "planner/time/step_time.h"
#include "tests/planner/predict_as_given.h"
#include "tests/planner/two_layer_graph.h"

namespace headroom::planner {
namespace {

RunSettings accumulating(Sharding sharding, Stack stack) {
  RunSettings s;
  s.precision = Precision::kBf16Mixed;
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.sharding = sharding;
  s.stack = stack;
  s.grad_accum = 4;
  return s;
}

// Llama 3.2 1B, bf16 mixed, FSDP1 on 8 GPUs, 2 micro-steps of 2 x 1024 tokens.
RunSettings llama_1b(Stack stack) {
  RunSettings s = torchtune_llama_1b();
  s.stack = stack;
  s.precision = Precision::kBf16Mixed;
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp1;
  s.grad_accum = 2;
  return s;
}

}  // namespace

TEST_CASE("the Trainer, Accelerate and litgpt accumulate under no_sync, torchtune, torchtitan and Composer do not") {
  CHECK(resolve_stack(accumulating(Sharding::kFsdp1, Stack::kHfTrainer)).top.fsdp_no_sync);
  // litgpt: fabric.no_backward_sync(model, enabled=is_accumulating) in its finetune scripts.
  CHECK(resolve_stack(accumulating(Sharding::kFsdp2, Stack::kLitgpt)).top.fsdp_no_sync);
  CHECK(resolve_stack(accumulating(Sharding::kFsdp2, Stack::kLitgpt)).bottom.fsdp_no_sync);
  for (Stack stack : {Stack::kTorchtune, Stack::kTorchtitan, Stack::kComposer}) {
    const ResolvedStack resolved = resolve_stack(accumulating(Sharding::kFsdp2, stack));
    CHECK_FALSE(resolved.top.fsdp_no_sync);
    for (const std::string& unknown : resolved.unknowns) CHECK(unknown.find("no_sync") == std::string::npos);
  }
  // Unknown: priced as no_sync, the band's bottom syncing every micro-step, and said.
  const ResolvedStack open = resolve_stack(accumulating(Sharding::kFsdp1, Stack::kUnspecified));
  CHECK(open.top.fsdp_no_sync);
  CHECK_FALSE(open.bottom.fsdp_no_sync);
  const auto says_no_sync = [](const ResolvedStack& r) {
    int count = 0;
    for (const std::string& unknown : r.unknowns) count += unknown.find("no_sync") != std::string::npos;
    return count;
  };
  CHECK(says_no_sync(open) == 1);
  RunSettings pinned = accumulating(Sharding::kFsdp1, Stack::kUnspecified);
  pinned.fsdp_no_sync = false;
  CHECK_FALSE(resolve_stack(pinned).top.fsdp_no_sync);
  CHECK(says_no_sync(resolve_stack(pinned)) == 0);
  // The band's bottom of a run FSDP does not shard leaves the setting unset (it is FSDP's).
  RunSettings plain;
  const std::optional<RunSettings> bottom = bottom_of_band(plain);
  REQUIRE(bottom.has_value());
  CHECK_FALSE(bottom->fsdp_no_sync.has_value());
  CHECK(validate_settings(*bottom, "t.json").is_ok());
  // The setting is FSDP's: refused where DeepSpeed shards.
  RunSettings deepspeed = accumulating(Sharding::kDeepspeed, Stack::kDeepspeed);
  deepspeed.fsdp_no_sync = true;
  CHECK(validate_settings(deepspeed, "t.json").message().find("t.json: fsdp_no_sync: ") == 0);
  // Without accumulation, or below ZeRO-3, there is nothing to keep.
  CHECK_FALSE(accumulates_unsharded(accumulating(Sharding::kFsdp1, Stack::kHfTrainer), GlobalConfig{3, Offload::kNone, Offload::kNone, 1, 1}));
}

TEST_CASE("litgpt shards LoRA with FSDP2 and a full fine-tune with FSDP1, and refuses multi-GPU QLoRA") {
  RunSettings s;
  s.stack = Stack::kLitgpt;
  s.gpus_per_node = 2;
  s.zero_stage = 3;
  s.mode = TrainMode::kLora;
  CHECK(sharding_of(s) == Sharding::kFsdp2);  // finetune/lora.py: ModelParallelStrategy, fully_shard
  s.mode = TrainMode::kFull;
  CHECK(sharding_of(s) == Sharding::kFsdp1);  // finetune/full.py: FSDPStrategy
  s.sharding = Sharding::kFsdp2;
  CHECK(sharding_of(s) == Sharding::kFsdp2);  // --sharding wins
  s.sharding.reset();
  s.mode = TrainMode::kQlora;
  s.zero_stage = 0;
  CHECK(validate_settings(s, "t.json").message().find("t.json: mode: litgpt's finetune scripts refuse") == 0);
  s.gpus_per_node = 1;
  CHECK(validate_settings(s, "t.json").is_ok());
}

TEST_CASE("under no_sync FSDP1 keeps each unit's unpadded gradient in the compute dtype, FSDP2 each parameter's in reduce_dtype") {
  const graph::LayerGraph graph = two_layers();
  const RunSettings fsdp1 = accumulating(Sharding::kFsdp1, Stack::kHfTrainer);
  const ModelStates one = model_states(graph, fsdp1, user_config(fsdp1), Accounting::kAllocated);
  REQUIRE(one.unsynced_block_grads.size() == 3);
  CHECK(one.unsynced_block_grads[1] == rounded(1'000'000'003LL * 2));  // bf16, not padded to a multiple of 8
  CHECK(one.unsynced_block_grads[2] == rounded(1'000'000'003LL * 2));
  CHECK(one.root_unsynced_grads == rounded(1'001 * 2));
  CHECK(one.unsynced_grads == 2 * rounded(1'000'000'003LL * 2) + rounded(1'001 * 2));
  // FSDP2 upcasts the accumulated gradient to the fp32 reduce dtype.
  RunSettings fsdp2 = fsdp1;
  fsdp2.sharding = Sharding::kFsdp2;
  const ModelStates two = model_states(graph, fsdp2, user_config(fsdp2), Accounting::kAllocated);
  CHECK(two.unsynced_block_grads[1] == rounded(1'000'000'003LL * 4));
  // Composer reduce-scatters every micro-step: nothing is kept unsharded.
  RunSettings composer = fsdp1;
  composer.stack = Stack::kComposer;
  CHECK(model_states(graph, composer, user_config(composer), Accounting::kAllocated).unsynced_grads == 0);
}

TEST_CASE("no_sync holds the unsharded gradients through the step and reduce-scatters once") {
  RunSettings every_micro_step = llama_1b(Stack::kHfTrainer);
  every_micro_step.fsdp_no_sync = false;
  const Prediction synced = predict_as_given(every_micro_step);
  const Prediction unsynced = predict_as_given(llama_1b(Stack::kHfTrainer));
  const RunSettings s = llama_1b(Stack::kHfTrainer);
  const Result<ModelContext> context = prepare_context(s);
  REQUIRE(context.is_ok());
  const ModelStates states = model_states(context->graph, s, user_config(s), Accounting::kAllocated);
  // 1.24 B parameters' bf16 gradients (2.5 GB) more at the peak, less the
  // reduce-scatter buffers the micro-steps before the last no longer allocate.
  const double extra = static_cast<double>(unsynced.peak_allocated - synced.peak_allocated);
  CHECK(extra > 0.8 * static_cast<double>(states.unsynced_grads));
  CHECK(extra <= static_cast<double>(states.unsynced_grads));
  // Both simulations end the step with the same memory: every held gradient is freed.
  const std::vector<BlockChoice> choices = user_block_choices(context.value(), s).value();
  const Simulation held = simulate(context.value(), s, user_config(s), choices);
  const Simulation reduced = simulate(context.value(), every_micro_step, user_config(s), choices);
  CHECK(held.memory.back().allocated == reduced.memory.back().allocated);
  CHECK(held.peak_allocated > reduced.peak_allocated);

  // One reduce-scatter a step instead of one a micro-step.
  const GpuSpec gpu = find_gpu("a100-80g").value();
  RunSettings exposed = s;
  exposed.overlap_comm = false;
  RunSettings every = exposed;
  every.fsdp_no_sync = false;
  StepTimeInputs in;
  in.seq_len = 1024;
  const GlobalConfig config = user_config(s);
  const ModelStates every_states = model_states(context->graph, every, config, Accounting::kAllocated);
  const double once = step_time(exposed, config, gpu, states, in).comm_exposed_ms;
  const double twice = step_time(every, config, gpu, every_states, in).comm_exposed_ms;
  const double reduce = gradient_collective_ms(every, gpu, 3, static_cast<double>(states.trainable_params) * 4);
  CHECK(twice - once == doctest::Approx(reduce));
}

}  // namespace headroom::planner
