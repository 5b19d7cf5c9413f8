#include "planner/mechanisms/fsdp_16_bit_gather.h"

#include "planner/settings/stack.h"
#include "planner/settings/stack_traits.h"

namespace headroom::planner {

// Under FSDP's mixed precision the adapters' sharded fp32 parameters are cast to
// param_dtype before the all-gather, and the unsharded parameter a LoRA layer reads is
// 16-bit. So neither of the casts an fp32 adapter costs elsewhere happens: autocast's
// cached_cast returns a tensor already in its dtype as it is (aten/src/ATen/autocast_mode.h,
// torch 2.11), and PEFT casts the layer's input to lora_A.weight.dtype only where the dtypes
// differ (peft 0.21.2 tuners/tuners_utils.py _cast_input_dtype), as ParamWrapper's
// factors are cast to the experts' weight dtype (peft/tuners/lora/layer.py). The meta-device
// oracle's Qwen3-MoE LoRA run under the Trainer and FSDP2 saves no such copy
// (bench/oracle: hf-trainer/qwen3-moe-2l/lora/b1s512/experts-fsdp2).
//
// Accelerate gives its FSDP plugin the accelerator's mixed precision whenever it is not
// "no" (accelerate 1.15 state.py AcceleratorState: fsdp_plugin.set_mixed_precision), and
// set_mixed_precision makes param_dtype that dtype (utils/dataclasses.py
// FullyShardedDataParallelPlugin.set_mixed_precision: FSDP2's MixedPrecisionPolicy with
// param_dtype, reduce_dtype and output_dtype; FSDP1's MixedPrecision). The Trainer's
// bf16=True is that mixed precision, and the autocast over its forward says it is on.
bool fsdp_mixed_precision_in_16_bits(const RunSettings& settings) {
  if (settings.precision == Precision::kBf16Mixed || settings.precision == Precision::kFp16Mixed) return true;
  return settings.stack == Stack::kHfTrainer && settings.precision == Precision::kBf16Pure &&
         resolve_stack(settings).top.autocast;
}

bool fsdp_gathers_in_16_bits(const RunSettings& settings) {
  return fsdp_shards_params(settings, settings.zero_stage) && fsdp_mixed_precision_in_16_bits(settings);
}

}  // namespace headroom::planner
