// The causal-LM loss as a stack computes it (planner/stack.h LossImpl): a
// rewrite of the graph's loss node and of the logits it reads. The builders
// model transformers' ForCausalLMLoss with the output kept by the caller
// (models/graph_builder.cc lm_loss); the other variants differ only in what is
// saved and how large the transients are. Sources in docs/stacks.md ("The loss").
#pragma once

#include "graph/layer_graph.h"
#include "planner/stack.h"

namespace headroom::planner {

// Rewrites every "loss" node that reads logits and writes NAME:log_probs. A
// graph without such a node (encoders, diffusion models) is left unchanged.
// `compiled`: the run uses torch.compile, which changes a chunked loss (torchtune
// compiles its per-chunk cross-entropy); the other variants are priced as eager.
void apply_loss_impl(graph::LayerGraph& graph, const LossSpec& loss, bool compiled = false);

}  // namespace headroom::planner
