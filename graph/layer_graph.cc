#include "graph/layer_graph.h"

#include <algorithm>

namespace headroom::graph {

int64_t Param::elements() const {
  int64_t total = 1;
  for (int64_t dim : shape) total *= dim;
  return total;
}

int64_t LayerGraph::parameter_count() const {
  int64_t total = 0;
  for (const Node& node : nodes) {
    for (const Param& param : node.params) {
      if (param.tied_to.empty() && !param.buffer) total += param.elements();
    }
  }
  return total;
}

int64_t LayerGraph::trainable_parameter_count() const {
  int64_t total = 0;
  for (const Node& node : nodes) {
    for (const Param& param : node.params) {
      if (param.trainable && param.tied_to.empty()) total += param.elements();
    }
  }
  return total;
}

const Tensor* LayerGraph::find_tensor(const std::string& tensor_name) const {
  for (const Tensor& tensor : tensors) {
    if (tensor.name == tensor_name) return &tensor;
  }
  return nullptr;
}

const Node* LayerGraph::find_node(const std::string& node_name) const {
  for (const Node& node : nodes) {
    if (node.name == node_name) return &node;
  }
  return nullptr;
}

int LayerGraph::producer_of(const std::string& tensor) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::vector<std::string>& outputs = nodes[i].outputs;
    if (std::find(outputs.begin(), outputs.end(), tensor) != outputs.end()) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace headroom::graph
