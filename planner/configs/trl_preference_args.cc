#include "planner/configs/trl_preference_args.h"

#include <algorithm>
#include <iterator>
#include <span>
#include <string>

#include "planner/configs/trl_grpo_args.h"

namespace headroom::planner {
namespace {

// Fields only DPOConfig has (dpo_config.py, 1.16.0): any of them makes the file a DPO run.
constexpr const char* kDpoFields[] = {"precompute_ref_log_probs", "precompute_ref_batch_size", "f_divergence_type",
                                      "f_alpha_divergence_coef", "ld_alpha", "discopop_tau", "use_weighting",
                                      "ref_model_init_kwargs", "ref_model_mixup_alpha", "ref_model_sync_steps"};
// DPOConfig's fields that change no memory: the loss's arithmetic on per-sequence
// numbers, the dataset's preparation, the pad token.
constexpr const char* kDpoIdle[] = {"beta", "loss_type", "loss_weights", "label_smoothing", "truncation_mode",
                                    "dataset_num_proc", "pad_token", "pad_to_multiple_of", "precompute_ref_batch_size",
                                    "f_divergence_type", "f_alpha_divergence_coef", "ld_alpha", "discopop_tau",
                                    "ref_model_mixup_alpha", "ref_model_sync_steps", "rpo_alpha"};
// Fields of the online-RL configs (GRPOConfig, RLOOConfig: grpo_config.py, rloo_config.py).
constexpr const char* kOnlineRlFields[] = {"num_generations", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
                                           "num_iterations"};
// Fields only RewardConfig (reward_config.py, 1.16.0) has: a saved RewardConfig writes
// center_rewards_coefficient even when it is null.
constexpr const char* kRewardFields[] = {"center_rewards_coefficient"};
// RewardConfig's fields that change no memory: the loss's arithmetic on one value a
// row, the dataset's preparation, the pad and EOS tokens.
constexpr const char* kRewardIdle[] = {"center_rewards_coefficient", "dataset_num_proc", "eos_token", "pad_token",
                                       "pad_to_multiple_of", "chat_template_path"};

bool has_any(ArgsReader& r, std::span<const char* const> keys, std::string& found) {
  for (const char* key : keys) {
    if (r.has(key)) {
      found = key;
      return true;
    }
  }
  return false;
}

void read_dpo(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  s.recipe = Recipe::kDpo;
  if (r.boolean_or("precompute_ref_log_probs", false)) s.reference = Reference::kPrecomputed;
  for (const char* key : kDpoIdle) r.has(key);
  // Each of these changes what the step holds, and none is modelled.
  if (r.boolean_or("padding_free", false)) r.fail("padding_free", "false (DPO's padding-free rows are not modelled)");
  if (!r.boolean_or("disable_dropout", true)) {
    r.fail("disable_dropout", "true (TRL's default; dropout kept on in DPO is not modelled)");
  }
  if (r.boolean_or("use_weighting", false)) {
    out.notes.push_back("use_weighting: the fused head also returns one fp32 value a token (log_sum_sq_probs), "
                        "not priced");
  }
  if (r.boolean_or("sync_ref_model", false)) {
    out.notes.push_back("sync_ref_model: the reference copy is updated in place every ref_model_sync_steps; "
                        "the step is priced without the update");
  }
  if (r.has("ref_model_init_kwargs")) {
    out.notes.push_back("ref_model_init_kwargs: the reference copy is priced as loaded in the policy's dtype");
  }
  // Before 1.0 DPOConfig truncated the prompt and the completion apart; the rows are
  // priced at max_length, prompt and completion together.
  for (const char* key : {"max_prompt_length", "max_completion_length"}) {
    if (r.has(key)) {
      out.notes.push_back(std::string(key) + ": rows are priced at max_length, prompt and completion together");
    }
  }
}

// RewardTrainer (reward_trainer.py, 1.16.0): AutoModelForSequenceClassification with
// num_labels=1, chosen and rejected rows in one batch, dropout off by default.
void read_reward(ArgsReader& r, RunSettings& s) {
  s.recipe = Recipe::kReward;
  for (const char* key : kRewardIdle) r.has(key);
  if (!r.boolean_or("disable_dropout", true)) {
    r.fail("disable_dropout", "true (TRL's default; dropout kept on in reward modelling is not modelled)");
  }
}

}  // namespace

void read_trl_preference_args(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  std::string found;
  if (r.names(kGrpoOnlyField)) {
    read_grpo_args(r, s, out);
    return;
  }
  if (has_any(r, kOnlineRlFields, found)) {
    r.fail(found, "no online-RL field other than GRPOConfig's (RLOO and other online RL are not modelled; a "
                  "GRPOConfig is told by " + std::string(kGrpoOnlyField) + ")");
    return;
  }
  if (std::any_of(std::begin(kRewardFields), std::end(kRewardFields), [&](const char* key) { return r.names(key); })) {
    read_reward(r, s);
    return;
  }
  if (has_any(r, kDpoFields, found)) read_dpo(r, s, out);
}

}  // namespace headroom::planner
