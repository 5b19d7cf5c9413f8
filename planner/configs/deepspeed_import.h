// Reading a DeepSpeed config (the JSON file given to deepspeed.initialize or
// to the HF Trainer's --deepspeed) into RunSettings, so `headroom fit` answers
// for the run exactly as the user launches it. Rules, key by key, in
// docs/config-export.md ("Importing a DeepSpeed config").
//
// - Keys read: zero_optimization.{stage, offload_optimizer.device,
//   offload_param.device, reduce_bucket_size, allgather_bucket_size,
//   stage3_prefetch_bucket_size, stage3_max_live_parameters, overlap_comm},
//   bf16/bfloat16.enabled, fp16.enabled, optimizer.type,
//   train_micro_batch_size_per_gpu, gradient_accumulation_steps, train_batch_size.
// - "auto" (filled in by the HF Trainer) keeps what `base` says.
// - A key that is absent takes DeepSpeed's default, as DeepSpeed would.
// - Counts may be written as integral floats (5e8); 1.5 is an error.
// - Refused as DeepSpeed refuses them: train_batch_size != micro x accumulation
//   x GPUs (GPUs from `base`), parameter offload or NVMe optimizer offload below
//   stage 3, optimizer offload at stage 0, unknown offload device, stage
//   outside 0-3, bf16 and fp16 both enabled, unknown keys inside
//   zero_optimization and its offload blocks, wrong types.
// Every error names the file (`origin`), the key path and what was expected.
// The planner's freedoms in `base` (max_zero_stage, allow_*) are left as they are.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

Result<RunSettings> apply_deepspeed_config(const nlohmann::json& ds, RunSettings base,
                                           std::string_view origin);

// Reads PATH (JSON; duplicate keys are an error, as in DeepSpeed) and applies it;
// a PATH that starts with '{' is the config itself, inline.
Result<RunSettings> load_deepspeed_config(const std::string& path, RunSettings base);

}  // namespace headroom::planner
