// libFuzzer target: what the MMEngine loader prints (scripts/exporter/read_mmengine_config.py),
// which a config's own code can shape: the shared JSON parse (its depth limit),
// then the XTuner and MMEngine readers (planner/configs/mmengine_import.h).
// Whatever they accept is valid settings; nothing crashes at any depth (issue 37).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "graph/json_text.h"
#include "planner/configs/mmengine_import.h"
#include "planner/configs/xtuner_import.h"
#include "planner/settings/validate_settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace planner = headroom::planner;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  headroom::Result<nlohmann::json> dump = headroom::graph::parse_json_text(text, "dump.json");
  if (!dump.is_ok()) return 0;
  for (bool deepspeed : {false, true}) {
    for (auto imported : {planner::import_xtuner_config(dump.value(), "c.py", planner::RunSettings{}, deepspeed),
                          planner::import_mmengine_config(dump.value(), "c.py", planner::RunSettings{}, deepspeed)}) {
      if (imported.is_ok() && !planner::validate_settings(imported->settings, "fuzz").is_ok()) __builtin_trap();
    }
  }
  return 0;
}
