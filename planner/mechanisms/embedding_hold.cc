#include "planner/mechanisms/embedding_hold.h"

#include <algorithm>
#include <string>
#include <vector>

namespace headroom::planner {

namespace {

// The final norm LlamaModel.forward holds inputs_embeds to, and the block that makes
// it (models/llama.cc build_llama).
constexpr const char* kFinalNorm = "model.norm";
constexpr const char* kEmbeddingsBlock = "embeddings";

graph::Node* node_named(graph::LayerGraph& graph, const std::string& name) {
  const auto it = std::find_if(graph.nodes.begin(), graph.nodes.end(), [&](const graph::Node& n) { return n.name == name; });
  return it == graph.nodes.end() ? nullptr : &*it;
}

}  // namespace

void release_embedding_hold(graph::LayerGraph& graph) {
  graph::Node* norm = node_named(graph, kFinalNorm);
  if (norm == nullptr) return;
  const auto block = std::find_if(graph.blocks.begin(), graph.blocks.end(),
                                  [](const graph::Block& b) { return b.name == kEmbeddingsBlock; });
  if (block == graph.blocks.end()) return;
  const int embeddings_block = static_cast<int>(block - graph.blocks.begin());
  std::vector<std::string>& holds = norm->holds;
  std::erase_if(holds, [&](const std::string& tensor) {
    const int producer = graph.producer_of(tensor);
    return producer >= 0 && graph.nodes[static_cast<size_t>(producer)].block == embeddings_block;
  });
}

}  // namespace headroom::planner
