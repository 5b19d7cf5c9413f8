// DeepSpeed ZeRO-3's linear: zero.Init (and the engine's conversion of a module's
// parameters) replaces torch.nn.functional.linear with zero3_linear_wrap for the
// rest of the process (runtime/zero/partition_parameters.py
// _enable_mem_efficient_linear; zero_optimization.memory_efficient_linear, true by
// default; DeepSpeed 0.19.8). Its autograd Function (runtime/zero/linear.py
// LinearFunctionForZeroStage3) saves input, weight and bias whatever needs a
// gradient, so a frozen nn.Linear keeps its input for backward where torch's keeps
// only the weight (docs/stacks.md, "DeepSpeed's ZeRO buffers").
#pragma once

#include "graph/layer_graph.h"

namespace headroom::planner {

// Every 16-bit or fp32 linear keeps its input whenever its Function runs backward:
// when the input requires grad or its weight trains. LoRA's adapters are linears of
// their own and keep theirs already. Returns how many linears changed.
int apply_zero3_linear(graph::LayerGraph& graph);

}  // namespace headroom::planner
