// libFuzzer target: the DeepSpeed config reader (planner/configs/deepspeed_import.h)
// on top of the shared JSON parse. Whatever it accepts is valid settings.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "graph/json_text.h"
#include "planner/configs/deepspeed_import.h"
#include "planner/settings/validate_settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = headroom::graph::parse_json_text(text, "ds.json");
  if (!json.is_ok()) return 0;
  auto settings = headroom::planner::apply_deepspeed_config(json.value(), headroom::planner::RunSettings{}, "ds.json");
  if (settings.is_ok() && !headroom::planner::validate_settings(settings.value(), "ds.json").is_ok()) __builtin_trap();
  return 0;
}
