// DoRA's setup graph at the peak: the tensors PEFT's update_layer leaves to autograd
// (planner/mechanisms/dora.h) are module buffers to the state walk, resident all run,
// and are kept by autograd the whole time, checkpointed layers too: they count as
// saved buffers (MemoryBreakdown::saved_buffers), as the oracle sees them.
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"
#include "planner/memory/state_bytes.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// The bytes of every DoRA setup tensor of `graph` under `precision`.
int64_t saved_dora_setup_bytes(const graph::LayerGraph& graph, Precision precision, Accounting accounting);

}  // namespace headroom::planner
