// libFuzzer target: the TrainingArguments reader (JSON or command line), the
// PEFT adapter config reader (planner/configs/hf_trainer_import.h) and the axolotl
// and LLaMA-Factory readers on top of them. Whatever they accept is
// valid settings.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "planner/configs/axolotl_import.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/configs/peft_import.h"
#include "planner/configs/llamafactory_import.h"
#include "planner/settings/validate_settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace planner = headroom::planner;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto imported : {planner::import_training_arguments(text, "args", planner::RunSettings{}),
                        planner::import_peft_config(text, "peft", planner::RunSettings{}),
                        planner::import_axolotl_config(text, "axolotl", planner::RunSettings{}),
                        planner::import_llamafactory_config(text, "llamafactory", planner::RunSettings{})}) {
    if (imported.is_ok() && !planner::validate_settings(imported->settings, "fuzz").is_ok()) __builtin_trap();
  }
  return 0;
}
