// How Inductor runs a compiled block's memory-bound ops: a connected run of
// fusible ops (planner/mechanisms/inductor_ops.h) becomes one generated kernel that reads
// what enters the run from memory once and writes only what leaves it (a
// tensor read outside the run or saved for backward), with one launch
// (torch/_inductor/scheduler.py fuses producer/consumer nodes that share
// loops; reductions fuse with their pointwise neighbours). Matmuls and
// attention stay extern kernels, priced as in eager mode. Eager mode runs each
// op as its own kernel with its own traffic. docs/memory-model.md, "Time model".
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

struct FusedKernel {
  int lead = -1;               // the node that carries the forward kernel's traffic and launch
  int backward_lead = -1;      // the first node on the autograd graph: carries the backward kernel
  std::vector<int> nodes;      // in execution order
  std::vector<int> reads;      // tensors read from memory in forward
  std::vector<int> writes;     // tensors written to memory in forward
  std::vector<int> saved;      // tensors its backward kernel reads (the partitioner's saves)
  std::vector<int> grads_in;   // tensors whose gradient the backward kernel reads
  std::vector<int> grads_out;  // tensors whose gradient the backward kernel writes
};

struct FusedKernels {
  std::vector<int> kernel_of;  // per node: index into `kernels`, or -1 (its own kernel)
  std::vector<FusedKernel> kernels;
};

// The kernels of every checkpointable block (the layers the stacks compile),
// from `analysis` after the partitioner has chosen the saves
// (apply_compiled_blocks).
FusedKernels fuse_compiled_blocks(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis);

}  // namespace headroom::planner
