// Gradients that wait across blocks: a tensor that blocks past the next read
// (GraphAnalysis::persistent, made by a node) gets its gradient from its latest reader's
// backward, and autograd holds it in the producer's input buffer until the producer runs
// backward (torch/csrc/autograd/input_buffer.cpp accumulate; engine.cpp evaluate_function).
// T5's encoder output, which every decoder layer's cross-attention reads: its gradient
// waits through the decoder's earlier layers and its embeddings.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

// Per block, the bytes of such gradients alive through its whole backward: those of the
// tensors made in an earlier block and read by a later one (`tensor_bytes` per tensor, the
// gradient in the tensor's dtype). The latest reader's own backward, which makes the
// gradient part-way, is not counted.
std::vector<int64_t> crossing_gradients(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                        const std::vector<int64_t>& tensor_bytes);

}  // namespace headroom::planner
