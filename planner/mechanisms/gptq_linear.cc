#include "planner/mechanisms/gptq_linear.h"

#include <string>

namespace headroom::planner {

using graph::DType;
using graph::Param;
using graph::SaveWhen;
using graph::SizeExpr;

void quantize_linear_gptq(graph::LayerGraph& graph, graph::Node& node, int64_t group_size) {
  const std::string weight_name = node.name + ".weight";
  for (size_t i = 0; i < node.params.size(); ++i) {
    if (node.params[i].name != weight_name || node.params[i].trainable) continue;
    const int64_t in = node.linear->in_features;
    const int64_t out = node.linear->out_features;
    // group_size -1: one group over the whole input (QuantLinear: group_size = infeatures).
    const int64_t group = group_size == -1 ? in : group_size;
    const int64_t groups = (in + group - 1) / group;
    // One element per weight in the packed dtype: 0.5 B each, the int32 words' bytes.
    node.params[i] = Param{node.name + ".qweight", {out, in}, DType::kInt4, false, ""};
    // QuantLinear registers the constants as buffers (register_buffer): the integer
    // ones keep their dtype when the model is cast, the fp16 scales follow it.
    node.params.push_back(Param{node.name + ".qzeros", {groups, (out + 7) / 8}, DType::kInt32, false, "", true});
    node.params.push_back(Param{node.name + ".scales", {groups, out}, DType::kF16, false, "", true});
    node.params.push_back(Param{node.name + ".g_idx", {in}, DType::kInt32, false, "", true});
    // torch.matmul(x, weight) keeps the unpacked weight for dX when x needs a gradient.
    const std::string dequantized = node.name + ".dequantized_weight";
    graph.tensors.push_back(graph::Tensor{dequantized, SizeExpr::constant(in * out), std::nullopt, false});
    node.outputs.push_back(dequantized);
    node.saves.push_back({dequantized, SaveWhen::kInputGrad});
    // The unpacking runs in forward only: backward keeps its scratch as it was.
    if (!node.bwd_workspace_elements) node.bwd_workspace_elements = node.workspace_elements;
    node.workspace_elements += SizeExpr::constant(in * out * kGptqScratchBytesPerWeight / 2);
    return;
  }
}

bool is_gptq_qweight(const Param& param) {
  return param.dtype == DType::kInt4 && param.name.ends_with(".qweight");
}

bool is_gptq_constant(const Param& param) {
  return param.name.ends_with(".qzeros") || param.name.ends_with(".scales") || param.name.ends_with(".g_idx");
}

}  // namespace headroom::planner
