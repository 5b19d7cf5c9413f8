#include "planner/predict/shared_grads_accumulating.h"

#include <algorithm>
#include <map>
#include <string>

#include "planner/memory/state_bytes.h"

namespace headroom::planner {

// Accumulating, every micro-step after the first finds each `.grad` made already, so a
// shared weight's (a tied embedding and LM head) first partial waits in autograd's input
// buffer beside it, from its first use in backward (the latest block) until its last use
// adds the other (torch/csrc/autograd/input_buffer.cpp accumulate, engine.cpp), and the
// sum is then added into `.grad` in place (functions/accumulate_grad.h accumulateGrad:
// `variable_grad += new_grad` outside grad mode). Without accumulation that buffer is the
// `.grad` to be, priced as the gradient (grads_by_node); partial_gradients prices the
// last use's partial and sum either way. Per block below the first use, the buffer's bytes
// (the first use's own block is left as it is: its partial comes at the block's end).
std::vector<int64_t> shared_grads_held_accumulating(const graph::LayerGraph& graph, const RunSettings& settings,
                                                    const GlobalConfig& config, const ModelStates& states,
                                                    Accounting accounting, size_t n) {
  std::vector<int64_t> held(n, 0);
  const bool plain_autograd = states.grads_progressive && !states.grads_in_backward && config.zero_stage == 0 &&
                              states.sharded_block_grads.empty() && states.reduce_scatter_block.empty() &&
                              states.unsynced_grads == 0;
  if (config.grad_accum == 1 || !plain_autograd) return held;
  const std::map<std::string, int> first_block = shared_gradient_first_block(graph);
  std::map<std::string, int> last_block;
  std::map<std::string, int64_t> bytes;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
      if (first_block.count(owner) == 0) continue;
      const auto [it, added] = last_block.emplace(owner, node.block);
      if (!added) it->second = std::min(it->second, node.block);
      if (param.tied_to.empty() && param.trainable) bytes[owner] = account(grad_bytes(param, settings.precision), accounting);
    }
  }
  for (const auto& [owner, buffer] : bytes) {
    const int first = first_block.at(owner);
    for (int k = std::max(0, last_block.at(owner)); k < first && k < static_cast<int>(n); ++k) held[k] += buffer;
  }
  return held;
}


}  // namespace headroom::planner
