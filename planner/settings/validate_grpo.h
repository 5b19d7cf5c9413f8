// GRPO as TRL 1.16's GRPOTrainer runs it (trl/trainer/grpo_trainer.py, grpo_config.py):
// what is modelled, and each refusal by name (docs/stacks.md, "Recipes").
#pragma once

#include <string_view>

#include "graph/status.h"
#include "planner/settings/grpo_settings.h"

namespace headroom::planner {

// GRPO's settings: the Trainer's stack, TRL 1.15 or later (the fused LM head), 16-bit
// weights, no ZeRO-3 or FSDP, a completion shorter than the row, whole prompt groups
// in a generation, the reference as the mode allows. Other recipes: their GRPO
// fields refused.
Status check_grpo_recipe(const RunSettings& settings, std::string_view origin);

}  // namespace headroom::planner
