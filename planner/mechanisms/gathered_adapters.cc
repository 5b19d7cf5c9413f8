#include "planner/mechanisms/gathered_adapters.h"

#include <map>
#include <string>
#include <utility>

#include "planner/mechanisms/trainability.h"

namespace headroom::planner {

void with_adapters_as_gathered(graph::LayerGraph& graph, graph::DType low,
                               const std::function<void(graph::LayerGraph&)>& rewrite) {
  // By node and parameter name: the rewrite inserts nodes, so no pointer into them may be kept.
  std::map<std::pair<std::string, std::string>, graph::DType> stored;
  for (graph::Node& node : graph.nodes) {
    for (graph::Param& param : node.params) {
      if (!is_lora_adapter(param) || !param.trainable || param.dtype == low) continue;
      stored.emplace(std::make_pair(node.name, param.name), param.dtype);
      param.dtype = low;
    }
  }
  rewrite(graph);
  for (graph::Node& node : graph.nodes) {
    for (graph::Param& param : node.params) {
      const auto found = stored.find({node.name, param.name});
      if (found != stored.end()) param.dtype = found->second;
    }
  }
}

}  // namespace headroom::planner
