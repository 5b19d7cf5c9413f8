// TRL's GRPOConfig (trl/trainer/grpo_config.py, 1.16.0) beside TrainingArguments, read
// into the GRPO recipe (docs/config-import.md). A saved GRPOConfig writes every field;
// importance_sampling_level is one only it has (RLOOConfig, which shares num_generations
// and the vLLM fields, does not).
#pragma once

#include "planner/configs/args_reader.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// The field that tells a GRPOConfig.
inline constexpr const char* kGrpoOnlyField = "importance_sampling_level";

// Sets recipe grpo, the completion's length, the groups, the generation's micro-steps
// and the reference (beta != 0: the mode's, as GRPOTrainer takes it) and vLLM's engine
// (use_vllm: colocated, with or without sleep mode, or a server); refuses by name what changes memory and is not modelled (continuous batching, a static cache,
// Liger's kernels, an fp32 head, more than one iteration per generation).
void read_grpo_args(ArgsReader& r, RunSettings& s, ConfigImport& out);

}  // namespace headroom::planner
