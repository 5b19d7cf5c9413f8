// TRL's ModelConfig arguments beside TrainingArguments (the model's dtype and
// attention, LoRA and 4-bit loading): trl/trainer/model_config.py.
#pragma once

#include "planner/configs/args_reader.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// TRL's ModelConfig, parsed from the same command line (trl/trainer/model_config.py):
// the model's load dtype and attention, LoRA through PEFT, bitsandbytes loading.
void read_trl_model_args(ArgsReader& r, RunSettings& s, ConfigImport& out);

}  // namespace headroom::planner
