#include "planner/mechanisms/kv_cache.h"

#include "graph/op_traits.h"

namespace headroom::planner {
namespace {

bool fused_attention(const graph::Node& node) {
  return node.op == graph::op::kAttention || node.op == graph::op::kFlexAttention ||
         node.op == graph::op::kTritonFlashAttention;
}

// The tensor the attention reads as K or V, before a repeat_kv copy made it per query head.
const graph::Tensor* cached_tensor(const graph::LayerGraph& graph, const std::string& name) {
  const int producer = graph.producer_of(name);
  if (producer >= 0 && graph.nodes[producer].op == graph::op::kRepeatKv) {
    return graph.find_tensor(graph.nodes[producer].inputs.front());
  }
  return graph.find_tensor(name);
}

}  // namespace

Result<std::vector<int64_t>> kv_cache_elements_per_token(const graph::LayerGraph& graph) {
  std::vector<int64_t> per_token;
  for (const graph::Node& node : graph.nodes) {
    if (node.op == graph::op::kMatmul && node.name.ends_with(".qk")) {
      return Status::invalid_input("GRPO's KV cache is priced for fused attention (sdpa, flex): expected "
                                   "--attention sdpa, got eager attention at " + node.name);
    }
    if (!fused_attention(node) || node.inputs.size() < 3) continue;
    for (size_t input : {1, 2}) {
      const graph::Tensor* tensor = cached_tensor(graph, node.inputs[input]);
      if (tensor != nullptr) per_token.push_back(tensor->elements.bs);
    }
  }
  if (per_token.empty()) {
    return Status::invalid_input("GRPO generates with a KV cache: expected a decoder with attention, found none");
  }
  return per_token;
}

}  // namespace headroom::planner
