// A zoo model as the trainer drives it: the LibTorch module built from the
// same config as the planner's graph, its parameters made trainable exactly as
// the planner's graph says (a name the graph lacks is an error, so planner and
// executor cannot silently disagree), and the loss of a micro-batch drawn
// deterministically from a sample index.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/executable_model.h"
#include "executor/run.h"
#include "graph/layer_graph.h"
#include "graph/status.h"
#include "models/torch/layers.h"
#include "planner/predict/plan.h"

namespace headroom::executor {

class TrainModel {
 public:
  virtual ~TrainModel() = default;
  virtual torch::nn::Module& module() = 0;
  // Mean loss of samples [first, first + batch) through `runner`.
  virtual Result<torch::Tensor> loss(int64_t first, int64_t batch, const models::torch_modules::BlockRunner& runner) = 0;
  virtual int64_t tokens_per_sample() const = 0;
  // Drops the model outputs loss() keeps alive through backward (the logits).
  virtual void release_outputs() {}
  // Called once the module has moved to its device and dtype (ResNet puts its
  // integer BatchNorm counters back).
  virtual void moved() {}
  // Trainable parameters with their names, in registration order.
  std::vector<std::pair<std::string, torch::Tensor>> trainable();
  std::string weights_source;  // the safetensors file the weights came from; empty: random
};

struct TrainModelOptions {
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat;  // parameters and compute
  int64_t seq_len = 0;                      // tokens (image tokens for Flux)
  // Whether the training loop holds the logits through backward, as the plan's
  // loss says (planner LossImpl kFullKeepLogits: a loop that keeps the model's
  // output; kFull: transformers' Trainer, whose training_step drops it, so only
  // what the loss saved stays).
  bool keep_logits = true;
};

// Builds the module (random initialisation from the global generator, so the
// caller seeds it), applies LoRA and trainability from `trained_graph` (the
// planner's graph with the training mode applied), and moves it to device/dtype.
Result<std::unique_ptr<TrainModel>> make_train_model(const ExecutableModel& model, const planner::Plan& plan,
                                                     const graph::LayerGraph& trained_graph,
                                                     const RunOptions& run, const TrainModelOptions& options);

}  // namespace headroom::executor
