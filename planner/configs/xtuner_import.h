// Reading an XTuner training config (the MMEngine Python config `xtuner train
// CONFIG` takes) into RunSettings. The config is Python: MMEngine's own loader
// reads it (scripts/exporter/read_mmengine_config.py, lazy-import mode) and
// prints it as JSON, which this reads: the model (XTuner's SupervisedFinetune or
// LLaVAModel with their LoRA and bitsandbytes keys), the data loader's batch and
// sequence, the optimizer wrapper (AMP, accumulation) and the checkpoint hook
// (those last, as every MMEngine config's, by planner/configs/mmengine_config.h).
// Rules in docs/config-import.md ("XTuner configs").
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// `dump` is what read_mmengine_config.py prints. `with_deepspeed`: the run is
// launched with `xtuner train ... --deepspeed FILE`, which hands precision,
// ZeRO and offload to that DeepSpeed config (read by --deepspeed after this).
Result<ConfigImport> import_xtuner_config(const nlohmann::json& dump, std::string_view origin, RunSettings base,
                                          bool with_deepspeed);

}  // namespace headroom::planner
