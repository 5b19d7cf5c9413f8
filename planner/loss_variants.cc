#include "planner/loss_variants.h"

#include <algorithm>
#include <string>

namespace headroom::planner {
namespace {

graph::SizeExpr divided(const graph::SizeExpr& e, int64_t n) {
  const auto up = [n](int64_t v) { return (v + n - 1) / n; };
  return graph::SizeExpr{up(e.c), up(e.b), up(e.s), up(e.bs), up(e.ss), up(e.bss)};
}

graph::Tensor* find_tensor(graph::LayerGraph& graph, const std::string& name) {
  for (graph::Tensor& tensor : graph.tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

void drop_save(graph::Node& node, const std::string& tensor) {
  std::erase_if(node.saves, [&](const graph::SavedRef& saved) { return saved.tensor == tensor; });
}

}  // namespace

void apply_loss_impl(graph::LayerGraph& graph, const LossSpec& loss) {
  if (loss.impl == LossImpl::kFullKeepLogits) return;
  for (graph::Node& node : graph.nodes) {
    if (node.op != "loss" || node.inputs.empty()) continue;
    const std::string log_probs_name = node.name + ":log_probs";
    if (std::find(node.outputs.begin(), node.outputs.end(), log_probs_name) == node.outputs.end()) continue;
    const std::string& logits_name = node.inputs.front();
    graph::Tensor* logits = find_tensor(graph, logits_name);
    graph::Tensor* log_probs = find_tensor(graph, log_probs_name);
    if (logits == nullptr || log_probs == nullptr) continue;
    switch (loss.impl) {
      case LossImpl::kFullKeepLogits:
        break;
      case LossImpl::kFull:
        // transformers Trainer.compute_loss returns only the loss, so the output
        // holding the 16-bit logits is gone before backward; cross_entropy keeps
        // only its fp32 log-probabilities (trainer.py, loss/loss_utils.py).
        drop_save(node, logits_name);
        break;
      case LossImpl::kChunked:
        // torchtune: the fp32 upcast and cross-entropy run chunk by chunk, and the
        // fp32 log-probabilities of every chunk stay saved until backward; the recipe
        // deletes the logits before backward (modules/loss/ce_chunked_output_loss.py,
        // recipes/*). CEWithChunkedOutputLoss (torchtune <= 0.5, and the published
        // cases) gets all 16-bit chunks from the model at once, so the logits keep
        // their full size here; LinearCrossEntropyLoss (0.6+) never holds more than a
        // chunk, which this over-counts by 2*T*V*(1 - 1/N) rather than risk under-counting.
        drop_save(node, logits_name);
        node.workspace_elements = divided(node.workspace_elements, loss.chunks);
        break;
      case LossImpl::kNoUpcast:
        // litgpt chunked_cross_entropy: no .float(), so log_softmax runs and saves in
        // the logits' dtype and there is no fp32 copy; the logits stay referenced
        // through backward (litgpt/utils.py, finetune/lora.py).
        log_probs->dtype.reset();
        node.workspace_elements = graph::SizeExpr{};
        break;
    }
  }
}

}  // namespace headroom::planner
