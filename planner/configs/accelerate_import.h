// Reading an Accelerate config (the YAML `accelerate config` writes and
// `accelerate launch --config_file FILE` takes) into RunSettings: how many
// processes on how many machines, the mixed precision, and the FSDP or
// DeepSpeed plugin. Rules in docs/config-import.md ("Accelerate configs").
//
// Read: distributed_type (NO, MULTI_GPU, FSDP, DEEPSPEED), num_processes,
// num_machines, mixed_precision, use_cpu; fsdp_config's sharding strategy,
// parameter offload, activation checkpointing, version and reshard after
// forward; deepspeed_config's zero_stage, offload devices and accumulation, or
// its deepspeed_config_file (read as --deepspeed). Every other key is listed.
#pragma once

#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

Result<ConfigImport> import_accelerate_config(std::string_view text, std::string_view origin, RunSettings base);
Result<ConfigImport> load_accelerate_config(const std::string& path, RunSettings base);

}  // namespace headroom::planner
