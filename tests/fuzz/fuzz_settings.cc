// libFuzzer target: the RunSettings reader (--settings FILE, a plan's
// "settings"). What it accepts is valid and survives its own round trip.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "graph/json_text.h"
#include "planner/settings/run_settings.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = headroom::graph::parse_json_text(text, "settings.json");
  if (!json.is_ok()) return 0;
  auto settings = headroom::planner::settings_from_json(json.value(), "settings.json");
  if (!settings.is_ok()) return 0;
  if (!headroom::planner::validate_settings(settings.value(), "settings.json").is_ok()) __builtin_trap();
  const auto written = headroom::planner::settings_to_json(settings.value());
  auto back = headroom::planner::settings_from_json(written, "settings.json");
  if (!back.is_ok() || headroom::planner::settings_to_json(back.value()) != written) __builtin_trap();
  return 0;
}
