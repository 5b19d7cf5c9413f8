#include "planner/predict/training_notes.h"

#include <algorithm>

namespace headroom::planner {

std::vector<std::string> training_notes(const graph::LayerGraph& graph, const GlobalConfig& config,
                                        std::string_view what) {
  std::vector<std::string> out;
  const auto batch_norms = std::count_if(graph.nodes.begin(), graph.nodes.end(), [](const graph::Node& node) {
    return node.op.starts_with("batch_norm");
  });
  if (config.grad_accum > 1 && batch_norms > 0) {
    // BatchNorm in training mode normalizes with the statistics of the batch it
    // sees and updates running_mean / running_var once per forward
    // (torch/nn/modules/batchnorm.py); MMEngine's gradient accumulation docs warn
    // that a model with BatchNorm then trains differently from the large batch.
    const std::string micro = std::to_string(config.micro_batch);
    const std::string steps = std::to_string(config.grad_accum);
    out.push_back(std::string(what) + " accumulates gradients over " + steps + " micro-batches of " + micro +
                  ", and the model has " + std::to_string(batch_norms) +
                  " BatchNorm layers: each normalizes with the statistics of its micro-batch of " + micro +
                  " samples and updates its running statistics " + steps +
                  " times a step, so this is not training with a batch of " +
                  std::to_string(config.micro_batch * config.grad_accum) +
                  " (MMEngine's docs warn of the same). A micro-batch of the whole batch, frozen BatchNorm "
                  "statistics or GroupNorm avoids it");
  }
  return out;
}

}  // namespace headroom::planner
