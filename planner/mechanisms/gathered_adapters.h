// PEFT's fp32 LoRA adapters as FSDP's mixed precision gathers them: 16-bit for what the
// forward and backward compute on, fp32 where they are stored and trained
// (fsdp_16_bit_gather.h says when; docs/memory-model.md, "FSDP's mixed precision gathers
// PEFT's fp32 adapters in 16 bits").
#pragma once

#include <functional>

#include "graph/layer_graph.h"

namespace headroom::planner {

// Runs `rewrite` (autocast's) on `graph` with its trainable LoRA adapters in `low`, the
// dtype FSDP gathers them in and the forward computes on, then gives each adapter back
// the dtype it is stored and trained in (its shard, gradient and optimizer states).
void with_adapters_as_gathered(graph::LayerGraph& graph, graph::DType low,
                               const std::function<void(graph::LayerGraph&)>& rewrite);

}  // namespace headroom::planner
