// DeepSpeed ZeRO-3's gathered parameters block by block, as DeepSpeed 0.19.8's
// parameter coordinator keeps them once its trace is complete (from the second
// step on): docs/stacks.md, "DeepSpeed's ZeRO buffers".
#pragma once

#include <cstdint>
#include <vector>

#include "planner/memory/model_states.h"
#include "planner/predict/model_context.h"
#include "planner/predict/step_model.h"

namespace headroom::planner {

struct Zero3Gathered {
  std::vector<int64_t> forward;   // per block: gathered while it runs forward
  std::vector<int64_t> backward;  // per block: gathered while it runs backward
};

// Bytes of the full 16-bit parameters DeepSpeed holds gathered beside each block
// (before accounting), or empty vectors where ZeRO-3 is not DeepSpeed's (FSDP, or the
// unspecified stack: headroom's own executor).
Zero3Gathered zero3_gathered_bytes(const ModelContext& context, const RunSettings& settings,
                                   const GlobalConfig& config);

// Sets model.gathered_fwd / gathered_bwd / gathered_bwd_before from them and drops
// the whole-step estimate they replace (ModelStates::gathered_params, model.gathered).
void apply_zero3_gathered(const ModelContext& context, const RunSettings& settings,
                          const GlobalConfig& config, Accounting accounting, ModelStates& states,
                          StepModel& model);

}  // namespace headroom::planner
