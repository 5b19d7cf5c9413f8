// torchtune's chunked output: the model applies its output projection to each of
// N chunks of the final hidden states (TransformerDecoder with num_output_chunks,
// torchtune/modules/transformer.py) and CEWithChunkedOutputLoss runs one
// cross-entropy per chunk. As one head and one loss node, the head block's
// backward would hold every saved logit beside every logit gradient; as N pairs,
// each chunk's saved logits are released as its gradient is made, which is how
// autograd runs them. docs/stacks.md, "The loss".
#pragma once

#include <string>

#include "graph/layer_graph.h"

namespace headroom::planner {

// Replaces the loss node `loss_name` and the linear that writes its logits with
// `chunks` head/loss pairs over 1/chunks of the rows each: sizes, FLOPs and
// workspaces divided, the weight shared (chunk 0 owns it, the others are tied to
// it), saved tensors and outputs renamed per chunk. All heads are created before
// all losses, so the execution order runs every chunk's head first, as the model
// does. Nothing changes when the logits are not written by a linear or chunks < 2.
void split_head_into_chunks(graph::LayerGraph& graph, const std::string& loss_name, int chunks);

}  // namespace headroom::planner
