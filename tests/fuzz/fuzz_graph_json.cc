// libFuzzer target: the layer-graph JSON reader and validator (graph_from_json).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "graph/graph_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = headroom::graph::parse_json_text(text, "fuzz.json");
  if (!json.is_ok()) return 0;
  auto graph = headroom::graph::graph_from_json(json.value(), "fuzz.json");
  if (graph.is_ok()) {
    // A graph that validates must survive a write/read round trip unchanged.
    auto back = headroom::graph::graph_from_json(headroom::graph::graph_to_json(graph.value()), "fuzz.json");
    if (!back.is_ok() || !headroom::graph::graphs_equal(back.value(), graph.value())) __builtin_trap();
  }
  return 0;
}
