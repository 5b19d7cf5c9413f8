// Structural analysis of a validated LayerGraph: execution order (Boost.Graph
// topological sort), which tensors require grad, which nodes run which part of
// backward, and for every block the tensors it keeps for backward when it runs
// normally and when it is checkpointed. Sizes stay symbolic here; the planner
// evaluates them at a micro-batch, sequence length and compute dtype.
//
// Attribution rules (docs/memory-model.md, "Activations"):
// - A node saves a tensor when its SaveWhen condition holds; a tensor saved by
//   several nodes is stored once.
// - A block keeps the saved tensors produced in it or read from its predecessor,
//   unless the producing block saves that tensor itself (then the producer counts it).
// - Graph inputs, and tensors read beyond the producer's successor by a checkpointable
//   block or by a node that saves them (rotary tables, timestep embeddings), are
//   "persistent": live for the whole step, counted once, never attributed to a block.
//   One read that far only by plain blocks' forward and saved by none (a UNet's skips)
//   is held_in_forward: live over that span of the forward.
// - A checkpointed block keeps only its boundary inputs, and only if it is on the
//   autograd graph; a block with nothing to differentiate keeps nothing either way.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/dtype.h"
#include "graph/layer_graph.h"

namespace headroom::graph {

struct BlockStructure {
  std::vector<int> nodes;            // node indices, in execution order
  std::vector<int> saved_tensors;    // kept for backward when not checkpointed
  std::vector<int> boundary_inputs;  // non-persistent tensors from earlier blocks it reads
  bool on_autograd = false;          // some node of the block runs backward
  bool has_trainable = false;        // some parameter of the block is trainable
};

struct GraphAnalysis {
  std::vector<int> order;                // node indices in execution order
  std::vector<int> producer;             // per tensor: node index, or -1 for graph inputs
  std::vector<std::vector<int>> consumers;  // per tensor: node indices reading it
  std::vector<std::vector<int>> node_inputs;   // per node: tensor indices of its inputs
  std::vector<std::vector<int>> node_outputs;  // per node: tensor indices of its outputs
  std::vector<std::vector<int>> node_saves;    // per node: tensor indices of its active saves
  std::vector<std::vector<int>> node_holds;    // per node: tensor indices of Node::holds
  std::vector<std::vector<int>> holders;       // per tensor: node indices holding it (Node::holds)
  std::vector<bool> requires_grad;       // per tensor
  std::vector<bool> needs_input_grad;    // per node: some input requires grad
  std::vector<bool> needs_param_grad;    // per node: has a trainable parameter
  std::vector<bool> persistent;          // per tensor: live for the whole step
  // per tensor: a forward frame holds it across blocks (Node::holds) and no later
  // block reads it, or only the next one and nothing saves it: live from its block to
  // the end of the forward, not in backward (ViTModel.forward's 16-bit pixel_values,
  // BertModel.forward's embedding_output under autocast).
  std::vector<bool> held_in_forward;
  std::vector<BlockStructure> blocks;

  // Whether node `node_index` keeps tensor `saved_tensor` (an index) saved
  // under condition `when`.
  bool save_active(int node_index, SaveWhen when, int saved_tensor) const;
};

// Assumes `graph` passed validate_graph(); asserts otherwise.
GraphAnalysis analyze_graph(const LayerGraph& graph);

// Recomputes every block's saved_tensors from node_saves (the attribution rules
// above), after a stage rewrote what nodes save (planner/mechanisms/compiled_blocks.h).
void attribute_block_saves(const LayerGraph& graph, GraphAnalysis& analysis);

// Bytes of one tensor at (batch, seq) when unset dtypes mean `compute_dtype`.
int64_t tensor_bytes(const Tensor& tensor, DType compute_dtype, int64_t batch, int64_t seq);

// Index of a tensor by name in graph.tensors, or -1.
int tensor_index(const LayerGraph& graph, const std::string& name);

}  // namespace headroom::graph
