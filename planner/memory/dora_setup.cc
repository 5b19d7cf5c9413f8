#include "planner/memory/dora_setup.h"

#include "planner/mechanisms/dora.h"

namespace headroom::planner {

int64_t saved_dora_setup_bytes(const graph::LayerGraph& graph, Precision precision, Accounting accounting) {
  int64_t bytes = 0;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (is_dora_setup_tensor(param)) bytes += account(param_storage_bytes(param, precision), accounting);
    }
  }
  return bytes;
}

}  // namespace headroom::planner
