// libFuzzer target: the plan file reader (plan_from_json, what simulate, report
// and run read). What it accepts survives its own round trip.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "graph/json_text.h"
#include "planner/predict/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = headroom::graph::parse_json_text(text, "plan.json");
  if (!json.is_ok()) return 0;
  auto plan = headroom::planner::plan_from_json(json.value(), "plan.json");
  if (!plan.is_ok()) return 0;
  auto back = headroom::planner::plan_from_json(headroom::planner::plan_to_json(plan.value()), "plan.json");
  if (!back.is_ok() || back->blocks.size() != plan->blocks.size() || back->config.micro_batch != plan->config.micro_batch) {
    __builtin_trap();
  }
  return 0;
}
