// libFuzzer target: the measurement file reader (reports/measured_run.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "graph/graph_json.h"
#include "reports/measured_run.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = headroom::graph::parse_json_text(text, "measured.json");
  if (!json.is_ok()) return 0;
  auto run = headroom::reports::measured_run_from_json(json.value(), "measured.json");
  if (run.is_ok()) {
    // What is accepted must survive its own round trip.
    auto back = headroom::reports::measured_run_from_json(headroom::reports::measured_run_to_json(run.value()),
                                                          "measured.json");
    if (!back.is_ok() || back->steps.size() != run->steps.size()) __builtin_trap();
  }
  return 0;
}
