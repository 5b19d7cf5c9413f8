#include "models/rope_tables.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

namespace headroom::models {
namespace {

// The node writing `tensor` and the tensor itself, copied; nullopt if either is missing.
std::optional<std::pair<graph::Node, graph::Tensor>> table_maker(const graph::LayerGraph& graph,
                                                                  const std::string& tensor) {
  const int producer = graph.producer_of(tensor);
  const graph::Tensor* made = graph.find_tensor(tensor);
  if (producer < 0 || made == nullptr) return std::nullopt;
  return std::pair{graph.nodes[static_cast<size_t>(producer)], *made};
}

bool reads(const graph::Node& node, const std::string& tensor) {
  return std::find(node.inputs.begin(), node.inputs.end(), tensor) != node.inputs.end();
}

// Block `block`'s own copy of a shared table: the maker renamed into that block.
std::string own_table(graph::LayerGraph& graph, const std::pair<graph::Node, graph::Tensor>& maker, int block,
                      const std::string& suffix, std::set<std::string>& made) {
  const std::string name = graph.blocks[static_cast<size_t>(block)].name + ".self_attn.rotary_emb." + suffix;
  if (made.insert(name).second) {
    graph::Node node = maker.first;
    node.name = name;
    node.block = block;
    node.outputs = {name};
    graph::Tensor tensor = maker.second;
    tensor.name = name;
    graph.nodes.push_back(std::move(node));
    graph.tensors.push_back(std::move(tensor));
  }
  return name;
}

}  // namespace

int give_layers_own_rope_tables(graph::LayerGraph& graph, const std::string& model_prefix) {
  std::set<std::string> made;
  std::set<int> blocks;
  for (const char* suffix : {"cos", "sin"}) {
    const std::string shared = model_prefix + ".rotary_emb." + suffix;
    const std::optional<std::pair<graph::Node, graph::Tensor>> maker = table_maker(graph, shared);
    if (!maker) continue;
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
      if (!reads(graph.nodes[n], shared)) continue;
      const int block = graph.nodes[n].block;
      const std::string own = own_table(graph, *maker, block, suffix, made);  // may grow graph.nodes
      graph::Node& node = graph.nodes[n];
      std::replace(node.inputs.begin(), node.inputs.end(), shared, own);
      for (graph::SavedRef& saved : node.saves) {
        if (saved.tensor == shared) saved.tensor = own;
      }
      blocks.insert(block);
    }
    std::erase_if(graph.nodes, [&](const graph::Node& node) { return node.name == maker->first.name; });
    std::erase_if(graph.tensors, [&](const graph::Tensor& tensor) { return tensor.name == shared; });
  }
  return static_cast<int>(blocks.size());
}

}  // namespace headroom::models
