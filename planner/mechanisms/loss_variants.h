// The causal-LM loss as a stack computes it (planner/settings/stack.h LossImpl): a
// rewrite of the graph's loss node and of the logits it reads. The builders
// model transformers' ForCausalLMLoss with the output kept by the caller
// (models/graph_builder.cc lm_loss); the other variants differ only in what is
// saved and how large the transients are. Sources in docs/stacks.md ("The loss").
#pragma once

#include "graph/layer_graph.h"
#include "planner/settings/stack.h"

namespace headroom::planner {

// Rewrites every "loss" node that reads logits and writes NAME:log_probs. A
// graph without such a node (encoders, diffusion models) is left unchanged.
// `compiled`: torch.compile covers the loss (StackSpec::compile_loss), which
// changes the full and chunked cross-entropies (one fused kernel per logits
// tensor, saving the 16-bit logits and two fp32 statistics per row); the
// no-upcast and shift-copy variants are priced as eager. `fp32_weights`: the
// weights are fp32 under autocast (AMP), which the fused linear cross-entropy's
// weight gradient and weight casts follow. `compute`: the compute dtype, in whose
// elements the transients of a node are counted. `micro_batch`: the run's (0: not
// known); at 1 the shifted logits of the shift-copy variants are no copy.
void apply_loss_impl(graph::LayerGraph& graph, const LossSpec& loss, bool compiled = false,
                     bool fp32_weights = false, graph::DType compute = graph::DType::kBF16,
                     int64_t micro_batch = 0);

// Whether `tensor` is a graph input the training loop's own code holds by a Python name
// and autograd does not save: litgpt's fp32 logits, which apply_loss_impl adds for
// fit's `logits`. At the peak its bytes are transient, not activations
// (docs/memory-model.md, "Categories at the peak").
bool held_by_caller(const graph::Tensor& tensor);

}  // namespace headroom::planner
