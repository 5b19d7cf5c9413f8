// GRPO's vLLM engine on the run's GPU (planner/mechanisms/vllm_engine.h): its share,
// its start-up checks, and what the answer says about it (docs/stacks.md, "GRPO with vLLM").
#pragma once

#include <string>
#include <vector>

#include "graph/status.h"
#include "planner/mechanisms/vllm_engine.h"
#include "planner/predict/model_context.h"
#include "planner/predict/plan.h"

namespace headroom::planner {

// The engine of a GRPO run on `context`'s GPU (all zero unless colocated).
VllmEngine vllm_engine_of(const ModelContext& context, const RunSettings& settings);

// vLLM's start-up refusals for a colocated GRPO run (check_vllm_starts); ok otherwise.
Status check_vllm_engine(const ModelContext& context, const RunSettings& settings);

// The answer's words on vLLM: the share and what it holds, a server's GPUs (not priced),
// and, when `prediction` does not fit, whether the smallest utilization vLLM could start
// with would leave the trainer enough. Empty without vLLM.
std::vector<std::string> vllm_notes(const ModelContext& context, const RunSettings& settings,
                                    const Prediction& prediction);

}  // namespace headroom::planner
