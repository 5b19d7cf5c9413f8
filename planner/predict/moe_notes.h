// Notes for a mixture-of-experts model (models/moe.h): which routing the
// answer assumes, and what QLoRA and LoRA do with fused 3-D experts.
#pragma once

#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Empty for a model without grouped experts (nodes of op "grouped_mm").
// Otherwise: the routing note (always), and under QLoRA the note that the
// experts stay 16-bit, naming their bytes.
std::vector<std::string> moe_notes(const graph::LayerGraph& graph, const RunSettings& settings);

// The experts' layout is transformers 5.x's (fused 3-D weights, grouped_mm). Before
// 5.0 each expert is its own nn.Linear modules (MixtralSparseMoeBlock's experts
// ModuleList, 4.44.2), which bitsandbytes quantizes and PEFT wraps: a run that gives
// transformers < 5 is refused by name rather than priced as 5.x.
Status refuse_unfused_experts(const graph::LayerGraph& graph, const RunSettings& settings);

// Whether the run's transformers release lays experts out as nn.Linear modules
// (before 5.0): the builders then run them in a Python loop (models/moe_loop.h).
// An unpinned release is priced as the current one (5.x).
bool experts_as_modules(const RunSettings& settings);

}  // namespace headroom::planner
