// PEFT's adapter_config.json (peft/tuners/lora/config.py LoraConfig). Read:
// peft_type (LORA), r, lora_dropout, target_modules, modules_to_save, bias,
// use_dora; lora_alpha and the rest have no bytes. docs/config-import.md.
#pragma once

#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

Result<ConfigImport> import_peft_config(std::string_view text, std::string_view origin, RunSettings base);
Result<ConfigImport> load_peft_config(const std::string& path, RunSettings base);

}  // namespace headroom::planner
