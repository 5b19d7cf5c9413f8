// transformers' enable_input_require_grads: a forward hook on the input
// embeddings calls output.requires_grad_(True), so a frozen embedding's output
// becomes a leaf that requires grad and everything after it records its graph
// (docs/stacks.md, "Input gradients under checkpointing"). transformers 5.x calls
// it from gradient_checkpointing_enable when main_input_name is "input_ids"
// (modeling_utils.py `_activation_checkpointing_enable`, 5.23.0): under LoRA with
// checkpointing the frozen embeddings block then keeps what its ops save (BERT:
// LayerNorm's fp32 input, the dropout's mask) and the leaf itself, which its
// AccumulateGrad node holds until backward.
#pragma once

#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

// In a graph whose main input is "input_ids", marks the output of every frozen input
// embedding, the module get_input_embeddings() returns in each PreTrainedModel (an
// embedding reading "input_ids", with the ops named inside it such as Gemma's scale
// in transformers 5.x; a patch convolution reading "pixel_values", CLIPModel's and
// LLaVA's vision towers), as requiring grad, and
// has each node that reads it keep it for backward (SaveWhen::kInputGrad). An
// embedding with a trainable table is left alone: its output requires grad
// already and is no leaf. Returns how many embeddings it marked.
int apply_input_require_grads(graph::LayerGraph& graph);

// The leaves apply_input_require_grads made (tensor indices) that only their
// AccumulateGrad nodes keep: it holds the variable itself (torch 2.11
// torch/csrc/autograd/functions/accumulate_grad.h, `Variable variable`), not through a
// saved-tensor pack hook, so at the peak such a leaf is transient, not a saved
// activation (docs/memory-model.md, "Categories at the peak"). Left out: a leaf a later
// block reads (a checkpointed layer's input, which the checkpoint saves) or a consumer
// saves for itself.
std::vector<int> input_grad_leaves(const graph::LayerGraph& graph);

// Those leaves made in a block that others run backward after (T5's decoder embedding,
// before the encoder's backward): the leaf and the `.grad` its block's backward gives it
// live through every earlier block's backward, as long as the graph holds the
// AccumulateGrad node. Each is added twice to `through_backward` at its block
// (ModelContext::ctx_held): the leaf, and its gradient of the same size.
void hold_input_grad_leaves(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                            std::vector<std::vector<int>>& through_backward);

}  // namespace headroom::planner
