#include "planner/predict/training_notes.h"

#include <algorithm>

#include "planner/mechanisms/trainability.h"
#include "planner/settings/stack.h"

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

// transformers 5.23.0 modeling_utils.py `_activation_checkpointing_enable` calls
// enable_input_require_grads() only when main_input_name == "input_ids"; PEFT 0.21.2
// PeftModel.__init__ only when checkpointing is already on when the model is wrapped,
// and the Trainer turns it on later. With use_reentrant=True torch.utils.checkpoint
// (CheckpointFunction) then returns outputs that require no grad: the meta-device
// oracle's ViT-B/16 LoRA runs train only the classifier (bench/oracle README).
std::vector<std::string> reentrant_checkpointing_notes(const graph::LayerGraph& graph, const RunSettings& settings) {
  const ResolvedStack stack = resolve_stack(settings);
  const bool hooked = graph.find_tensor("input_ids") != nullptr && stack.top.input_require_grads;
  if (settings.stack != Stack::kHfTrainer || settings.mode == TrainMode::kFull ||
      settings.checkpointing == CheckpointPolicy::kNone || hooked) {
    return {};
  }
  const bool adapters_checkpointed = std::any_of(graph.nodes.begin(), graph.nodes.end(), [&](const graph::Node& n) {
    return graph.blocks[static_cast<size_t>(n.block)].checkpointable &&
           std::any_of(n.params.begin(), n.params.end(), [](const graph::Param& p) { return is_lora_adapter(p); });
  });
  if (!adapters_checkpointed) return {};
  if (stack.top.recompute == Recompute::kBlockReentrant) {
    return {"with reentrant checkpointing (use_reentrant=True) no LoRA adapter inside a checkpointed layer of " +
            graph.name + " gets a gradient, and this answer prices that: transformers adds no input-gradient hook "
            "here, so no checkpointed layer's input requires grad and only what lies outside them trains. To train "
            "the adapters call model.enable_input_require_grads() before training, or use_reentrant=False"};
  }
  return {"with reentrant checkpointing (gradient_checkpointing_kwargs={\"use_reentrant\": True}) no LoRA adapter "
          "inside a checkpointed layer of " + graph.name + " gets a gradient: transformers adds no input-gradient "
          "hook here (from 5.x it does for a model whose main input is input_ids), so no checkpointed layer's input "
          "requires grad; only what lies outside them trains. This answer prices the non-reentrant default, where the adapters train; with "
          "use_reentrant=True call model.enable_input_require_grads() before training"};
}

}  // namespace headroom::planner
