#include "planner/predict/ctx_recomputed.h"

namespace headroom::planner {

std::vector<int> ctx_recomputed_tensors(const ModelContext& context, size_t block) {
  std::vector<int> out;
  if (block >= context.ctx_held.size()) return out;
  for (int t : context.ctx_held[block]) {
    const graph::Tensor& tensor = context.graph.tensors[static_cast<size_t>(t)];
    const int producer = context.analysis.producer[static_cast<size_t>(t)];
    if (producer < 0 || tensor.requires_grad) continue;
    if (context.graph.nodes[static_cast<size_t>(producer)].block != static_cast<int>(block)) continue;
    out.push_back(t);
  }
  return out;
}

}  // namespace headroom::planner
