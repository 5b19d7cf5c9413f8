#include "planner/settings/stack_traits.h"

namespace headroom::planner {

bool runs_transformers_models(Stack value) {
  return value == Stack::kHfTrainer || value == Stack::kDeepspeed || value == Stack::kTorchAmp ||
         value == Stack::kUnspecified;
}

bool through_deepspeed_engine(const RunSettings& settings) {
  return settings.stack == Stack::kDeepspeed || (settings.zero_stage > 0 && sharding_of(settings) == Sharding::kDeepspeed);
}

bool autocast_matters(const RunSettings& settings) {
  if (settings.precision == Precision::kBf16Pure) return true;
  // FSDP's mixed precision computes on 16-bit unsharded parameters, and Accelerate
  // (or Composer) wraps that forward in autocast too: the same ops run in fp32.
  const bool mixed = settings.precision == Precision::kBf16Mixed || settings.precision == Precision::kFp16Mixed;
  return mixed && fsdp_shards_params(settings, settings.zero_stage);
}

bool kbit_prep_matters(const RunSettings& settings) {
  // With ZeRO, DeepSpeed's engine casts the module to 16 bits after the script's
  // preparation (runtime/engine.py _configure_distributed_model: module.bfloat16()),
  // and TRL skips it for sharded QLoRA (FSDP1's FlatParameter takes one dtype).
  // Without autocast an upcast residual stream would meet the 16-bit linears
  // (validate_settings refuses kbit_prep with autocast off).
  return settings.mode == TrainMode::kQlora && settings.quant == QuantFormat::kNf4 &&
         settings.precision == Precision::kBf16Pure && settings.zero_stage == 0 &&
         (settings.stack == Stack::kHfTrainer || settings.stack == Stack::kUnspecified) &&
         settings.autocast.value_or(true);
}

bool unsloth_offloads_checkpoint_inputs(const RunSettings& settings) {
  constexpr int64_t kOffloadFromTokens = 512;  // _utils.py: `if max_seq_length < 512`
  return settings.stack == Stack::kUnsloth && settings.checkpointing != CheckpointPolicy::kNone &&
         (settings.seq_len == 0 || settings.seq_len >= kOffloadFromTokens);
}

bool uses_expandable_segments(const RunSettings& settings) {
  // Unsloth sets expandable_segments:True unless UNSLOTH_VLLM_STANDBY (unsloth_zoo/__init__.py).
  return settings.expandable_segments.value_or(settings.stack == Stack::kTorchtitan ||
                                                settings.stack == Stack::kUnsloth);
}

// torchtitan (parallelisms), torchtune (training/_distributed.py shard_model) and
// litgpt (FSDP strategy) shard with torch's fully_shard; Composer wraps the model
// in FullyShardedDataParallel (composer/trainer/dist_strategy.py prepare_fsdp_module);
// the others mean DeepSpeed.
Sharding sharding_of(const RunSettings& settings) {
  if (settings.sharding) return *settings.sharding;
  switch (settings.stack) {
    case Stack::kTorchtitan:
    case Stack::kTorchtune: return Sharding::kFsdp2;
    // litgpt (at 2685705): finetune/lora.py shards with Fabric's ModelParallelStrategy
    // (parallelize_fn: fully_shard per Block, FSDP2); finetune/full.py and pretrain.py
    // with its FSDPStrategy (FSDP1, auto_wrap_policy={Block}, limit_all_gathers).
    case Stack::kLitgpt: return settings.mode == TrainMode::kFull ? Sharding::kFsdp1 : Sharding::kFsdp2;
    case Stack::kComposer: return Sharding::kFsdp1;
    default: return Sharding::kDeepspeed;
  }
}

bool shards_with_fsdp(const RunSettings& settings) { return sharding_of(settings) != Sharding::kDeepspeed; }
bool shards_with_fsdp2(const RunSettings& settings) { return sharding_of(settings) == Sharding::kFsdp2; }
bool fsdp_shards_params(const RunSettings& settings, int zero_stage) {
  return zero_stage >= 2 && shards_with_fsdp(settings);
}
bool fsdp_keeps_unsharded(const RunSettings& settings, int zero_stage) {
  return zero_stage == 2 && shards_with_fsdp(settings);
}

// Under mixed precision FSDP's sharded parameters are fp32 and the stacks reduce in
// fp32: Composer's mixed_precision DEFAULT sets reduce_dtype float32
// (composer/trainer/mosaic_fsdp_utils.py get_mixed_precision), torchtitan's
// mixed_precision_reduce defaults to float32. A 16-bit model reduces in its dtype.
ReduceDtype reduce_dtype_of(const RunSettings& settings) {
  if (settings.reduce_dtype) return *settings.reduce_dtype;
  const bool mixed = settings.precision == Precision::kBf16Mixed || settings.precision == Precision::kFp16Mixed;
  return mixed ? ReduceDtype::kFp32 : ReduceDtype::kParam;
}

bool fsdp2_keeps_last_layer(Stack value) { return value == Stack::kTorchtitan; }

bool fsdp1_prefetches_backward(const RunSettings& settings) { return settings.stack != Stack::kHfTrainer; }

bool accelerate_carves_fsdp2_ends(const RunSettings& settings) {
  if (settings.stack != Stack::kHfTrainer || !shards_with_fsdp2(settings)) return false;
  const std::optional<Release> accelerate = release_of(settings.versions, "accelerate");
  return accelerate && *accelerate >= Release{1, 14, 0};
}

}  // namespace headroom::planner
