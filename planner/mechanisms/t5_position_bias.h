// T5's cross-attention position bias under the Trainer's gradient checkpointing.
// The decoder's first cross-attention, which has no relative attention bias, makes its
// position_bias as zeros [1, heads, T, S] and, when `gradient_checkpointing and
// self.training`, sets `position_bias.requires_grad = True` (transformers 5.23.0
// models/t5/modeling_t5.py, T5Attention.forward; 4.44.2 alike). The zeros are then a
// leaf that requires grad: its AccumulateGrad node holds it until the graph is freed,
// after the whole backward (torch 2.11 torch/csrc/autograd/functions/accumulate_grad.h,
// `Variable variable`), and every cross-attention's backward adds to its gradient, which
// the engine hands AccumulateGrad once the first decoder layer's is done and which stays
// as the leaf's `.grad` with it (docs/memory-model.md, "Encoder-decoders").
#pragma once

#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

// Marks the zero cross-attention biases (models/t5.cc, "<layer>.EncDecAttention.zero_bias")
// as leaves that require grad (Tensor::requires_grad). Returns how many it marked.
int apply_t5_bias_leaves(graph::LayerGraph& graph);

// The marked leaves (tensor indices).
std::vector<int> t5_bias_leaves(const graph::LayerGraph& graph);

// Adds each leaf to what its producer's block holds when checkpointed
// (`checkpoint_saves`, as a selective save: the checkpoint does not recompute a leaf
// the graph holds) and to what lives through every earlier block's backward
// (`through_backward`, ModelContext::ctx_held): the leaf at its producer's block, and
// its gradient, of the leaf's size, at its last reader's, whose backward makes it.
void hold_t5_bias_leaves(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                         std::vector<std::vector<int>>& checkpoint_saves,
                         std::vector<std::vector<int>>& through_backward);

// The last block reading leaf `t`: its gradient lives from that block's backward on.
int t5_bias_gradient_block(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, int t);

}  // namespace headroom::planner
