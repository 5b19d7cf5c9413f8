#include "planner/settings/validate_unsloth.h"

#include <array>
#include <string>

namespace headroom::planner {
namespace {

Status fail(std::string_view origin, std::string_view field, const std::string& what) {
  return Status::invalid_input(std::string(origin) + ": " + std::string(field) + ": " + what);
}

// One refusal: whether the run has it, the field it names and what is missing.
struct Refusal {
  bool (*applies)(const RunSettings&);
  std::string_view field;
  std::string_view why;
};

// Each row cites what the source shows (or does not show) for that combination.
constexpr std::array<Refusal, 9> kRefusals = {{
    // full_finetuning=True skips patch_peft_model: no fused LoRA kernels, and
    // prepare_model_for_training wraps the forward in its own autocast (training_utils.py).
    {[](const RunSettings& s) { return s.mode == TrainMode::kFull; }, "mode",
     "Unsloth's full fine-tuning (full_finetuning=True: no fused LoRA kernels, fp32 norms under its own "
     "autocast wrapper) is not modelled; expected mode lora or qlora under stack unsloth"},
    {[](const RunSettings& s) { return s.mode == TrainMode::kQlora && s.quant != QuantFormat::kNf4; }, "quant",
     "Unsloth's 4-bit bases are bitsandbytes NF4 (load_in_4bit); expected quant nf4 under stack unsloth"},
    // The fast paths and the offloading checkpointer keep per-device globals
    // (gradient_checkpointing.py GPU_BUFFERS per device); no ZeRO or FSDP path in the source.
    {[](const RunSettings& s) { return s.world_size() > 1 || s.zero_stage > 0; }, "gpus",
     "Unsloth with more than one GPU or with ZeRO/FSDP is not modelled; expected gpus 1 and zero 0 under stack "
     "unsloth"},
    {[](const RunSettings& s) { return s.precision != Precision::kBf16Pure; }, "precision",
     "Unsloth loads the base in 16 bits and trains under the Trainer's bf16 autocast; expected precision bf16 "
     "under stack unsloth"},
    {[](const RunSettings& s) { return s.recipe && *s.recipe != Recipe::kSupervised; }, "recipe",
     "Unsloth's patched DPO/GRPO/reward trainers are not modelled; expected recipe supervised under stack unsloth"},
    // attention_dispatch.py select_attention_backend: flash-attn, xformers or SDPA.
    {[](const RunSettings& s) { return s.attention != models::AttentionImpl::kSdpa; }, "attention",
     "Unsloth picks flash-attn, xformers or SDPA itself (unsloth/utils/attention_dispatch.py); expected "
     "attention sdpa under stack unsloth"},
    {[](const RunSettings& s) { return s.compile; }, "compile",
     "torch.compile of an Unsloth model (its own compiled modules, unsloth_zoo/compiler.py) is not modelled; "
     "expected compile off under stack unsloth"},
    {[](const RunSettings& s) { return s.float8 != Float8Recipe::kNone; }, "float8",
     "Unsloth's fp8 paths are not modelled; expected float8 none under stack unsloth"},
    // The stack's own checkpointer offloads the inputs (stack_traits.h
    // unsloth_offloads_checkpoint_inputs); torchtune's stash semantics do not apply.
    {[](const RunSettings& s) { return s.offload_checkpoint_inputs; }, "offload_checkpoint_inputs",
     "Unsloth's checkpointer offloads the layer inputs itself (use_gradient_checkpointing=\"unsloth\"); expected "
     "offload_checkpoint_inputs false under stack unsloth"},
}};

}  // namespace

Status check_unsloth(const RunSettings& settings, std::string_view origin) {
  if (settings.stack != Stack::kUnsloth) return Status::ok();
  for (const Refusal& refusal : kRefusals) {
    if (refusal.applies(settings)) return fail(origin, refusal.field, std::string(refusal.why));
  }
  return Status::ok();
}

Status check_unsloth_family(std::string_view family, std::string_view model) {
  // patch_peft_model picks a fused MLP for more families, but headroom prices the
  // SwiGLU decoder of these three (models/llama.cc), as FastLlamaModel,
  // FastMistralModel and FastQwen2Model run it.
  for (std::string_view known : {"llama", "mistral", "qwen2"}) {
    if (family == known) return Status::ok();
  }
  return Status::unsupported("model: " + std::string(model) + " (" + std::string(family) +
                             ") has no Unsloth fast path headroom models; expected a llama, mistral or qwen2 "
                             "model under stack unsloth");
}

}  // namespace headroom::planner
