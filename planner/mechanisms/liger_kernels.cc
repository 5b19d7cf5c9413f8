#include "planner/mechanisms/liger_kernels.h"

#include <algorithm>
#include <string>
#include <vector>

#include "planner/mechanisms/unsloth_model.h"

namespace headroom::planner {
namespace {

// The gated MLP's product `act_fn(gate) * up` (models/llama.cc: "<mlp>.act_mul_up" over
// "<mlp>.act_fn") as the fused Function: one node reading the gate and up projections and
// keeping both; the activation's node and output go.
int fuse_gated_products(graph::LayerGraph& graph) {
  std::vector<std::string> fused_acts;
  for (graph::Node& node : graph.nodes) {
    if (!node.name.ends_with(".mlp.act_mul_up") || node.inputs.size() != 2) continue;
    const std::string mlp = node.name.substr(0, node.name.size() - std::string(".act_mul_up").size());
    const graph::Node* act = graph.find_node(mlp + ".act_fn");
    if (act == nullptr || act->outputs.size() != 1 || act->inputs.empty() || node.inputs.front() != act->outputs.front()) {
      continue;
    }
    const std::string gate = act->inputs.front();
    const std::string up = node.inputs.back();
    const graph::Tensor* product = graph.find_tensor(node.outputs.front());
    node.op = std::string(kLigerGatedMulOp);
    node.inputs = {gate, up};
    node.saves = {graph::SavedRef{gate, graph::SaveWhen::kAnyGrad}, graph::SavedRef{up, graph::SaveWhen::kAnyGrad}};
    node.fwd_flops += act->fwd_flops;
    node.bwd_input_flops += act->bwd_input_flops;
    // a and b read, c written in forward; dc, a and b read, da and db written in backward.
    if (product != nullptr) node.fwd_io_elements = product->elements.scaled(3);
    fused_acts.push_back(act->name);
    const std::string act_output = act->outputs.front();
    std::erase_if(graph.tensors, [&](const graph::Tensor& tensor) { return tensor.name == act_output; });
  }
  std::erase_if(graph.nodes, [&](const graph::Node& n) {
    return std::find(fused_acts.begin(), fused_acts.end(), n.name) != fused_acts.end();
  });
  return static_cast<int>(fused_acts.size());
}

}  // namespace

LigerRewrites apply_liger_kernels(graph::LayerGraph& graph) {
  LigerRewrites rewrites;
  // LigerRMSNormFunction saves what fast_rms_layernorm saves: X, W and the fp32 RSTD.
  rewrites.norms = unsloth_fused_norms(graph);
  rewrites.glus = fuse_gated_products(graph);
  return rewrites;
}

}  // namespace headroom::planner
