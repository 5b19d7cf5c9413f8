// libFuzzer target: the YAML config readers (planner/configs/yaml_config.h on libyaml):
// torchtune recipe configs and Accelerate configs. Whatever they accept is
// valid settings.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "planner/configs/accelerate_import.h"
#include "planner/configs/torchtune_import.h"
#include "planner/settings/validate_settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace planner = headroom::planner;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto imported : {planner::import_torchtune_config(text, "c.yaml", {}, planner::RunSettings{}),
                        planner::import_accelerate_config(text, "a.yaml", planner::RunSettings{})}) {
    if (imported.is_ok() && !planner::validate_settings(imported->settings, "fuzz").is_ok()) __builtin_trap();
  }
  return 0;
}
