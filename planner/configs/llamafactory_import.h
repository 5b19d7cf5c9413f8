// Reading a LLaMA-Factory training config (the YAML `llamafactory-cli train
// FILE` takes) into RunSettings. LLaMA-Factory parses it with HfArgumentParser
// into its model, data, finetuning and transformers TrainingArguments
// dataclasses (llamafactory/hparams/parser.py), so its own keys are renamed
// onto the Trainer's and TRL's and the rest is read as TrainingArguments
// (planner/configs/hf_trainer_import.h). Rules in docs/config-import.md ("LLaMA-Factory").
#pragma once

#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

Result<ConfigImport> import_llamafactory_config(std::string_view text, std::string_view origin, RunSettings base);
Result<ConfigImport> load_llamafactory_config(const std::string& path, RunSettings base);

}  // namespace headroom::planner
