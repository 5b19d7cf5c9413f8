// TRL's preference trainers' arguments beside TrainingArguments: DPOConfig
// (trl/trainer/dpo_config.py, 1.16.0) read into the DPO recipe, RewardConfig
// (reward_config.py) into the reward recipe; GRPOConfig (grpo_config.py) into the GRPO
// recipe (configs/trl_grpo_args.h); other online-RL configs refused by name.
#pragma once

#include "planner/configs/args_reader.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// A DPOConfig (told by its own fields) sets recipe dpo, and the reference to
// precomputed under precompute_ref_log_probs; fields that change memory and are not
// modelled are refused, the others read. A RewardConfig (told by
// center_rewards_coefficient) sets recipe reward. A GRPOConfig (told by
// importance_sampling_level) sets recipe grpo; RLOOConfig is refused.
void read_trl_preference_args(ArgsReader& r, RunSettings& s, ConfigImport& out);

}  // namespace headroom::planner
