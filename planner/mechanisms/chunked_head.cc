#include "planner/mechanisms/chunked_head.h"

#include <algorithm>
#include <map>

namespace headroom::planner {
namespace {

int node_index(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// One chunk of `node`: its outputs renamed (new tensors of 1/chunks the size,
// each coefficient rounded up: a per-token statistic of 2 elements becomes 1 per
// token per chunk, a few bytes a token too many),
// inputs and saves that name a renamed tensor follow, work divided.
graph::Node chunk_of(const graph::Node& node, int index, int chunks, std::map<std::string, std::string>& renamed,
                     const graph::LayerGraph& graph, std::vector<graph::Tensor>& new_tensors) {
  const std::string suffix = "#chunk" + std::to_string(index);
  graph::Node out = node;
  out.name = node.name + suffix;
  for (std::string& input : out.inputs) {
    if (const auto it = renamed.find(input); it != renamed.end()) input = it->second;
  }
  for (std::string& output : out.outputs) {
    const graph::Tensor* tensor = graph.find_tensor(output);
    graph::Tensor copy = *tensor;
    copy.name = output + suffix;
    copy.elements = tensor->elements.divided_up(chunks);
    new_tensors.push_back(copy);
    renamed[output] = copy.name;
    output = copy.name;
  }
  for (graph::SavedRef& saved : out.saves) {
    if (const auto it = renamed.find(saved.tensor); it != renamed.end()) saved.tensor = it->second;
  }
  out.fwd_flops = node.fwd_flops.divided_up(chunks);
  out.bwd_input_flops = node.bwd_input_flops.divided_up(chunks);
  out.bwd_param_flops = node.bwd_param_flops.divided_up(chunks);
  out.fwd_io_elements = node.fwd_io_elements.divided_up(chunks);
  out.workspace_elements = node.workspace_elements.divided_up(chunks);
  if (node.bwd_workspace_elements) out.bwd_workspace_elements = node.bwd_workspace_elements->divided_up(chunks);
  // linear->rows stays whole: SizeExpr's integer coefficients cannot hold B*S/N.
  // Past the training mode (LoRA, QLoRA) only the time model's tiling reads it,
  // and it leaves a node whose FLOPs fall short of the whole GEMM unstretched.
  if (index > 0) {
    for (graph::Param& param : out.params) {
      if (param.tied_to.empty()) param.tied_to = param.name;
      param.name += suffix;
    }
  }
  return out;
}

}  // namespace

void split_head_into_chunks(graph::LayerGraph& graph, const std::string& loss_name, int chunks) {
  if (chunks < 2) return;
  const int loss = node_index(graph, loss_name);
  if (loss < 0 || graph.nodes[loss].inputs.empty()) return;
  const int head = graph.producer_of(graph.nodes[loss].inputs.front());
  if (head < 0 || !graph.nodes[head].linear || head > loss) return;

  std::vector<graph::Tensor> new_tensors;
  std::vector<graph::Node> heads;
  std::vector<graph::Node> losses;
  for (int i = 0; i < chunks; ++i) {
    std::map<std::string, std::string> renamed;
    heads.push_back(chunk_of(graph.nodes[head], i, chunks, renamed, graph, new_tensors));
    losses.push_back(chunk_of(graph.nodes[loss], i, chunks, renamed, graph, new_tensors));
  }
  std::vector<std::string> replaced = graph.nodes[head].outputs;
  replaced.insert(replaced.end(), graph.nodes[loss].outputs.begin(), graph.nodes[loss].outputs.end());
  std::erase_if(graph.tensors, [&](const graph::Tensor& t) {
    return std::find(replaced.begin(), replaced.end(), t.name) != replaced.end();
  });
  graph.tensors.insert(graph.tensors.end(), new_tensors.begin(), new_tensors.end());

  std::vector<graph::Node> nodes;
  nodes.reserve(graph.nodes.size() + 2 * static_cast<size_t>(chunks));
  for (int i = 0; i < static_cast<int>(graph.nodes.size()); ++i) {
    if (i == head) {
      nodes.insert(nodes.end(), heads.begin(), heads.end());
    } else if (i == loss) {
      nodes.insert(nodes.end(), losses.begin(), losses.end());
    } else {
      nodes.push_back(std::move(graph.nodes[i]));
    }
  }
  graph.nodes = std::move(nodes);
}

}  // namespace headroom::planner
