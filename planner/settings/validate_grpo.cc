#include "planner/settings/validate_grpo.h"

#include <string>

#include "planner/settings/stack.h"
#include "planner/settings/versions.h"

namespace headroom::planner {
namespace {

Status fail(std::string_view origin, std::string_view field, const std::string& what) {
  return Status::invalid_input(std::string(origin) + ": " + std::string(field) + ": " + what);
}

// GRPOConfig's fields without the recipe: nothing reads them.
Status check_not_grpo(const RunSettings& s, std::string_view origin) {
  if (s.completion_tokens) return fail(origin, "completion_tokens", "GRPO's: expected recipe grpo with it");
  if (s.steps_per_generation) return fail(origin, "steps_per_generation", "GRPO's: expected recipe grpo with it");
  if (s.reference == Reference::kNone) return fail(origin, "reference", "none is GRPO's (beta 0): expected recipe grpo");
  if (s.generation) return fail(origin, "generation", "GRPO's generation engine: expected recipe grpo with it");
  if (s.vllm_gpu_memory_utilization || s.vllm_max_model_len) {
    return fail(origin, s.vllm_max_model_len ? "vllm_max_model_len" : "vllm_gpu_memory_utilization",
                "GRPO's colocated vLLM's: expected recipe grpo and generation vllm-colocate with it");
  }
  return Status::ok();
}

Status check_grpo_stack(const RunSettings& s, std::string_view origin) {
  if (s.stack != Stack::kHfTrainer && s.stack != Stack::kUnspecified) {
    return fail(origin, "recipe", "GRPO is modelled as TRL's GRPOTrainer over the Trainer: expected stack "
                                  "hf-trainer, got " + std::string(stack_name(s.stack)));
  }
  const std::optional<Release> trl = release_of(s.versions, "trl");
  if (trl && *trl < Release{1, 15, 0}) {
    return fail(origin, "recipe", "GRPOTrainer before TRL 1.15 scores the completion over full logits "
                                  "(selective_log_softmax), which is not modelled: expected trl 1.15 or later");
  }
  if (s.zero_stage == 3) {
    return fail(origin, "recipe", "GRPO under ZeRO-3 or FSDP gathers the whole model for generation "
                                  "(ds3_gather_for_generation, summon_full_params), which is not modelled: expected "
                                  "zero_stage 0 to 2");
  }
  if (s.precision != Precision::kBf16Pure) {
    return fail(origin, "precision", "GRPO's generation is modelled over 16-bit weights (generate runs outside the "
                                     "prepared model's autocast, its cache in the weights' dtype): expected bf16");
  }
  return Status::ok();
}

Status check_grpo_shape(const RunSettings& s, std::string_view origin) {
  const int64_t completion = grpo_completion_tokens(s);
  if (s.seq_len > 0 && s.seq_len <= completion) {
    return fail(origin, "seq_len", "GRPO's rows are the prompt and max_completion_length (" +
                                       std::to_string(completion) + ") together: expected seq above it, got " +
                                       std::to_string(s.seq_len));
  }
  if (s.num_generations < 2) {
    return fail(origin, "num_generations", "GRPO needs 2 or more completions a prompt (GRPOConfig), got " +
                                               std::to_string(s.num_generations));
  }
  const int64_t rows = grpo_generation_rows(s) * s.world_size();
  if (rows % s.num_generations != 0) {
    return fail(origin, "num_generations", "a generation holds whole prompt groups: expected a divisor of the "
                                           "generation batch (micro-batch x steps_per_generation x GPUs = " +
                                               std::to_string(rows) + "), got " + std::to_string(s.num_generations));
  }
  return Status::ok();
}

Status check_grpo_reference(const RunSettings& s, std::string_view origin) {
  const Reference reference = s.reference.value_or(kGrpoDefaultReference);
  if (reference == Reference::kPrecomputed) {
    return fail(origin, "reference", "GRPO's reference scores the completions it just generated: expected none "
                                     "(beta 0), copy or adapter-disabled");
  }
  // copy and adapter-disabled both say beta != 0: GRPOTrainer takes the one the mode
  // allows (resolve_reference), whichever was given.
  return Status::ok();
}

bool colocates_vllm(const RunSettings& s) {
  return s.generation == Generation::kVllmColocate || s.generation == Generation::kVllmColocateSleep;
}

// vLLM's fields (GRPOConfig vllm_*): the colocated engine's, in the range vLLM takes.
Status check_grpo_vllm(const RunSettings& s, std::string_view origin) {
  if (!colocates_vllm(s)) {
    if (s.vllm_gpu_memory_utilization) {
      return fail(origin, "vllm_gpu_memory_utilization", "the colocated engine's share: expected generation "
                                                         "vllm-colocate or vllm-colocate-sleep with it");
    }
    if (s.vllm_max_model_len) {
      return fail(origin, "vllm_max_model_len", "the colocated engine's context: expected generation "
                                                "vllm-colocate or vllm-colocate-sleep with it");
    }
  }
  if (s.vllm_gpu_memory_utilization &&
      !(*s.vllm_gpu_memory_utilization > 0 && *s.vllm_gpu_memory_utilization <= 1)) {
    return fail(origin, "vllm_gpu_memory_utilization", "a fraction above 0 and at most 1, got " +
                                                           std::to_string(*s.vllm_gpu_memory_utilization));
  }
  // VLLMGeneration._init_vllm (trl/generation/vllm_generation.py, 1.16.0) hands a 4-bit
  // policy to vLLM with quantization="bitsandbytes", and PEFT merges the adapters into
  // the 4-bit weights for every weight sync: neither is modelled.
  if (s.generation && *s.generation != Generation::kGenerate && s.mode == TrainMode::kQlora) {
    return fail(origin, "generation", "QLoRA with vLLM (a bitsandbytes-quantized engine, adapters merged into "
                                      "4-bit weights at each sync) is not modelled: expected mode lora or full, or "
                                      "generation generate");
  }
  return Status::ok();
}

}  // namespace

Status check_grpo_recipe(const RunSettings& s, std::string_view origin) {
  if (s.recipe != Recipe::kGrpo) return check_not_grpo(s, origin);
  for (auto check : {check_grpo_stack, check_grpo_shape, check_grpo_reference, check_grpo_vllm}) {
    if (Status status = check(s, origin); !status.is_ok()) return status;
  }
  return Status::ok();
}

}  // namespace headroom::planner
