#include "planner/configs/trl_grpo_args.h"

#include <charconv>
#include <optional>
#include <string>

namespace headroom::planner {
namespace {

// GRPOConfig's fields that change no memory the planner prices: the rewards and
// advantages (one value a completion), the loss's arithmetic on [rows, completion]
// values, sampling's parameters, logging.
constexpr const char* kGrpoIdle[] = {
    "importance_sampling_level", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "epsilon",
    "epsilon_high", "delta", "reward_weights", "scale_rewards", "multi_objective_aggregation", "loss_type",
    "mask_truncated_completions", "top_entropy_quantile", "sapo_temperature_neg", "sapo_temperature_pos",
    "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "entropy_coef", "use_adaptive_entropy",
    "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target", "off_policy_mask_threshold",
    "use_bias_correction_kl", "log_completions", "num_completions_to_print", "log_unique_prompts",
    "num_generations_eval", "shuffle_dataset", "ds3_gather_for_generation", "ref_model_mixup_alpha", "ref_model_sync_steps", "generation_kwargs", "chat_template_kwargs"};

// What GRPOTrainer runs differently, each not modelled: the key, the value TRL needs for
// the priced path, and why.
void refuse_unmodelled(ArgsReader& r) {
  if (r.boolean_or("use_transformers_continuous_batching", false) || r.boolean_or("use_transformers_paged", false)) {
    r.fail("use_transformers_continuous_batching", "false (generate_batch's paged cache is not modelled)");
  }
  if (r.has("cache_implementation")) {
    r.fail("cache_implementation", "null (generate's DynamicCache; a static or offloaded cache is not modelled)",
           r.raw("cache_implementation"));
  }
  if (r.boolean_or("use_liger_kernel", false)) {
    r.fail("use_liger_kernel", "false (Liger's RMSNorm, RoPE and SwiGLU kernels change what the step keeps; not "
                               "modelled)");
  }
  if (r.boolean_or("cast_lm_head_to_fp32", false)) {
    r.fail("cast_lm_head_to_fp32", "false (an fp32 LM head in the policy and the reference is not modelled)");
  }
  if (r.count_or("num_iterations", 1, 1 << 20) != 1) {
    r.fail("num_iterations", "1 (more iterations add the old policy's no-grad log-prob pass, not modelled)",
           r.raw("num_iterations"));
  }
  if (r.has("max_tool_calling_iterations")) {
    r.fail("max_tool_calling_iterations", "null (tool-calling rollouts are not modelled)",
           r.raw("max_tool_calling_iterations"));
  }
}

// generation_batch_size or steps_per_generation (GRPOConfig.__post_init__ takes one).
void read_generation_batch(ArgsReader& r, RunSettings& s) {
  if (r.has("steps_per_generation")) {
    s.steps_per_generation = r.count_or("steps_per_generation", 1, kMaxGradAccum);
    r.names("generation_batch_size");
    return;
  }
  if (!r.has("generation_batch_size")) return;
  const int64_t rows = r.count_or("generation_batch_size", 1, kMaxGlobalBatch);
  const int64_t global = s.micro_batch * s.world_size();
  if (rows % global != 0) {
    r.fail("generation_batch_size", "a multiple of per_device_train_batch_size x GPUs (" + std::to_string(global) +
                                        ")", r.raw("generation_batch_size"));
    return;
  }
  s.steps_per_generation = rows / global;
}

// beta (GRPOConfig's default 0.0: no reference model).
void read_beta(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (!r.has("beta")) return;
  const nlohmann::json& beta = r.raw("beta");
  if (!beta.is_number()) {
    r.fail("beta", "a number", beta);
    return;
  }
  if (beta.get<double>() == 0.0) return;
  s.reference = s.mode == TrainMode::kFull ? Reference::kCopy : Reference::kAdapterDisabled;
  out.notes.push_back("beta " + beta.dump() + ": a reference's log-probs, a frozen copy of the model, or the "
                      "adapter-disabled base under LoRA (no second copy)");
  if (r.boolean_or("sync_ref_model", false)) {
    out.notes.push_back("sync_ref_model: the reference copy is updated in place; the step is priced without it");
  }
}

// create_model_from_path (trl/trainer/utils.py, 1.16.0) loads the policy in
// model_init_kwargs' dtype, float32 when it names none: bf16 with a 16-bit load is
// pure bf16, otherwise autocast over fp32 weights (bf16-amp, which GRPO refuses).
void read_load_dtype(ArgsReader& r, RunSettings& s) {
  if (!r.has("model_init_kwargs") || s.precision != Precision::kBf16Amp) return;
  const nlohmann::json& kwargs = r.raw("model_init_kwargs");
  if (!kwargs.is_object() || !kwargs.contains("dtype") || !kwargs.at("dtype").is_string()) return;
  const std::string dtype = kwargs.at("dtype").get<std::string>();
  if (dtype == "bfloat16" || dtype == "auto") s.precision = Precision::kBf16Pure;
}

// A share of the GPU, a JSON number or a string ("0.5").
std::optional<double> share_of(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string text = v.get<std::string>();
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The colocated engine's fields (VLLMGeneration's arguments, trl/trainer/grpo_trainer.py 1.16.0).
void read_colocated_vllm(ArgsReader& r, RunSettings& s) {
  if (r.count_or("vllm_tensor_parallel_size", 1, 1 << 20) != 1) {
    r.fail("vllm_tensor_parallel_size", "1 (a tensor-parallel engine shared by several trainer ranks is not "
                                        "modelled)", r.raw("vllm_tensor_parallel_size"));
  }
  s.generation = r.boolean_or("vllm_enable_sleep_mode", false) ? Generation::kVllmColocateSleep
                                                               : Generation::kVllmColocate;
  if (r.has("vllm_gpu_memory_utilization")) {
    const std::optional<double> share = share_of(r.raw("vllm_gpu_memory_utilization"));
    if (!share || !(*share > 0 && *share <= 1)) {
      r.fail("vllm_gpu_memory_utilization", "a fraction above 0 and at most 1", r.raw("vllm_gpu_memory_utilization"));
      return;
    }
    s.vllm_gpu_memory_utilization = *share;
  }
  if (r.has("vllm_max_model_length")) s.vllm_max_model_len = r.count_or("vllm_max_model_length", 1, kMaxSeqLen);
}

// use_vllm and vllm_mode (GRPOConfig's defaults: false, "colocate").
void read_vllm(ArgsReader& r, RunSettings& s) {
  for (const char* key : {"vllm_mode", "vllm_enable_sleep_mode", "vllm_gpu_memory_utilization",
                          "vllm_max_model_length", "vllm_tensor_parallel_size",
                          "vllm_importance_sampling_correction"}) {
    r.names(key);
  }
  if (!r.boolean_or("use_vllm", false)) return;
  // _generate_and_score_completions runs the old policy's no-grad log-prob pass with vLLM
  // when the correction is on (its default): priced; without it that pass is not modelled.
  if (!r.boolean_or("vllm_importance_sampling_correction", true)) {
    r.fail("vllm_importance_sampling_correction", "true (without it the old policy's log-prob pass depends on "
                                                  "steps_per_generation, not modelled with vLLM)");
    return;
  }
  const std::string mode = r.string_or("vllm_mode", "colocate");
  if (mode == "server") {
    s.generation = Generation::kVllmServer;
  } else if (mode == "colocate") {
    read_colocated_vllm(r, s);
  } else {
    r.fail("vllm_mode", "\"colocate\" or \"server\"", r.raw("vllm_mode"));
  }
}

}  // namespace

void read_grpo_args(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  s.recipe = Recipe::kGrpo;
  for (const char* key : kGrpoIdle) r.names(key);
  refuse_unmodelled(r);
  read_vllm(r, s);
  s.completion_tokens = r.count_or("max_completion_length", 512, kMaxSeqLen);
  s.num_generations = r.count_or("num_generations", 8, kMaxGlobalBatch);
  read_generation_batch(r, s);
  read_beta(r, s, out);
  read_load_dtype(r, s);
  if (r.boolean_or("disable_dropout", false)) {
    s.dropout = 0;
    s.lora.dropout = 0;
  }
}

}  // namespace headroom::planner
