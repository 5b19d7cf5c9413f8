// Structural checks of a LayerGraph, run on every graph read from a file and
// every graph a builder returns, so that analysis and the planner can assert
// instead of checking. The first violation found is reported as one message
// naming `origin` (a file name or builder name), the field path and what was
// expected, e.g.
//   model.json: nodes[3] ("layers.0.mlp").inputs[0]: unknown tensor "h7"
//   (expected the name of a tensor in "tensors")
#pragma once

#include <optional>

#include <string_view>

#include "graph/layer_graph.h"
#include "graph/status.h"

namespace headroom::graph {

// Largest micro-batch every size of a valid graph must evaluate at without
// overflowing int64 (together with S = sequence.max_seq).
inline constexpr int64_t kValidateMaxBatch = 1024;

// Ok when the graph is well formed:
// - version is kLayerGraphFormatVersion, the name is non-empty, the sequence spec
//   is sane, and there is at least one block and one node;
// - block, node, tensor and parameter names are non-empty and unique; a tied
//   parameter names an untied parameter with the same element count;
// - every tensor a node reads, writes or saves exists, each tensor has at most one
//   producer, a node saves only its own inputs and outputs;
// - shapes are positive and every size (tensor elements and bytes, FLOPs, I/O,
//   workspace, linear rows) is non-negative and fits int64 at B = kValidateMaxBatch,
//   S = sequence.max_seq;
// - no node reads a tensor produced in a later block, and the producer->consumer
//   graph of nodes has no cycle.
Status validate_graph(const LayerGraph& graph, std::string_view origin);

// For a graph validate_graph refuses: a context so long that some size overflows
// int64 at B = kValidateMaxBatch (the S^2 attention FLOPs of a 1,048,576-token
// config.json) would make it invalid at any run length. Lowers sequence.max_seq
// to the longest length at which the graph validates and returns the old
// maximum; nullopt, the graph left as is, when it is invalid for another reason
// (for validate_graph to name).
std::optional<int64_t> cap_max_seq_to_int64(LayerGraph& graph);

}  // namespace headroom::graph
