#include "planner/mechanisms/kbit_prep.h"

#include <algorithm>

#include "graph/op_traits.h"
#include "planner/mechanisms/trainability.h"

namespace headroom::planner {

void apply_kbit_prep(graph::LayerGraph& graph, KbitPrep prep) {
  if (prep == KbitPrep::kNone) return;
  for (graph::Node& node : graph.nodes) {
    // TRL casts modules whose name holds "norm" (and every nn.LayerNorm): the graph's norm nodes.
    if (prep == KbitPrep::kNormsFp32 && node.op != graph::op::kNorm) continue;
    for (graph::Param& param : node.params) {
      // The adapters come after the preparation (get_peft_model), in their own dtype;
      // modules trained in full beside them (modules_to_save) copy the upcast module.
      if (is_lora_adapter(param) || param.buffer || is_quantized_storage(param.dtype) ||
          is_quantization_constant(param)) {
        continue;
      }
      param.upcast_fp32 = true;
    }
  }
}

bool has_upcast_params(const graph::LayerGraph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const graph::Node& node) {
    return std::any_of(node.params.begin(), node.params.end(), [](const graph::Param& p) { return p.upcast_fp32; });
  });
}

}  // namespace headroom::planner
