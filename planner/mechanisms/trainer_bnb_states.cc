#include "planner/mechanisms/trainer_bnb_states.h"

#include "graph/op_traits.h"

namespace headroom::planner {

bool trainer_keeps_32bit_states(const RunSettings& settings, const graph::Node& node, bool sharded_optimizer) {
  // A node of op "embedding" is one nn.Embedding (models/graph_builder.cc
  // GraphBuilder::embedding): its single parameter is the module's weight.
  return settings.stack == Stack::kHfTrainer && settings.optimizer == OptimizerKind::kAdamW8bit &&
         !sharded_optimizer && node.op == graph::op::kEmbedding;
}

OptimizerKind state_layout(const RunSettings& settings, const graph::Node& node, bool sharded_optimizer) {
  return trainer_keeps_32bit_states(settings, node, sharded_optimizer) ? OptimizerKind::kAdamW : settings.optimizer;
}

}  // namespace headroom::planner
