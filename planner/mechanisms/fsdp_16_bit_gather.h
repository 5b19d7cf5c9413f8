// FSDP's mixed precision gathers every parameter in 16 bits, PEFT's fp32 LoRA adapters
// included: the forward and the backward compute on 16-bit unsharded adapters, so
// nothing casts them (gathered_adapters.h), while their shards, gradients and optimizer
// states stay fp32.
// docs/memory-model.md, "FSDP's mixed precision gathers PEFT's fp32 adapters in 16 bits".
#pragma once

#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Whether FSDP's mixed precision, where FSDP shards the run's parameters, gathers every
// parameter in 16 bits: its param_dtype casts each shard before the all-gather (torch
// 2.11 _fully_shard/_fsdp_param.py all_gather_inputs; FSDP1's _use_low_precision_shard).
// bf16-mixed and fp16-mixed, and Accelerate's FSDP under the Trainer's bf16=True over a
// bf16 model, whose plugin gets MixedPrecisionPolicy(param_dtype=bf16) (FSDP1:
// MixedPrecision) from the accelerator's mixed precision.
bool fsdp_mixed_precision_in_16_bits(const RunSettings& settings);
// That, and FSDP shards this run's parameters (at settings.zero_stage).
bool fsdp_gathers_in_16_bits(const RunSettings& settings);

}  // namespace headroom::planner
