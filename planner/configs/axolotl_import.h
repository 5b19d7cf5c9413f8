// Reading an axolotl config (the YAML `axolotl train config.yml` takes) into
// RunSettings. Axolotl builds transformers TrainingArguments and a PEFT config
// from it (axolotl/core/trainer_builder.py, utils/models.py), so its keys are
// renamed onto the Trainer's and TRL's and read by the TrainingArguments reader
// (planner/configs/hf_trainer_import.h). Rules in docs/config-import.md ("axolotl").
#pragma once

#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

Result<ConfigImport> import_axolotl_config(std::string_view text, std::string_view origin, RunSettings base);
Result<ConfigImport> load_axolotl_config(const std::string& path, RunSettings base);

}  // namespace headroom::planner
