// DPO's and GRPO's reference model as TRL 1.16.0 runs it (trl/trainer/dpo_trainer.py,
// grpo_trainer.py; docs/stacks.md): a frozen copy of the policy's weights, or the
// adapter-disabled base under PEFT, or log-probs precomputed before training. The step
// walk (step_builder.cc add_reference) and the simulator price it from here.
#pragma once

#include <cstdint>

#include "planner/memory/state_bytes.h"
#include "planner/predict/model_context.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Bytes of the frozen reference copy resident all step, in the policy's dtype
// (DPOTrainer loads it with dtype=self.model.dtype); 0 without a copy.
int64_t reference_weight_bytes(const ModelContext& context, const RunSettings& settings, Accounting accounting);

// Whether the step runs a no-grad reference forward over the same batch before the
// policy's (DPO with a copy or the adapter-disabled base; GRPO's runs in its log-prob
// pass instead, planner/predict/grpo_phases.h).
bool dpo_reference_forward(const RunSettings& settings);

}  // namespace headroom::planner
