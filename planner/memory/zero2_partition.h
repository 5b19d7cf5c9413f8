// ZeRO-2's 16-bit gradient partition as DeepSpeed 0.19.8 sizes it on each rank
// (deepspeed/runtime/zero/stage_1_and_2.py): not 1/world of the gradients but the
// whole numel of every parameter that touches the rank's slice of its flattened
// group, so ranks differ. headroom prices the largest rank's (docs/stacks.md,
// "DeepSpeed's ZeRO buffers").
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"

namespace headroom::planner {

// Elements of the largest grads_in_partition over the `world` ranks, for a model
// trained through the Trainer's two parameter groups (weight decay and not).
int64_t zero2_largest_grad_partition_elements(const graph::LayerGraph& graph, int world);

}  // namespace headroom::planner
