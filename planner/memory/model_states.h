// Model states per rank: parameters, gradients, optimizer states and fp32 master
// weights, after ZeRO partitioning and CPU/NVMe offload; their host RAM and disk
// footprint; the size of one training-state checkpoint. Sources for every factor
// are in docs/memory-model.md ("Model states").
#pragma once

#include "graph/layer_graph.h"
#include "planner/memory/state_bytes.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

ModelStates model_states(const graph::LayerGraph& graph, const RunSettings& settings,
                         const GlobalConfig& config, Accounting accounting);

}  // namespace headroom::planner
