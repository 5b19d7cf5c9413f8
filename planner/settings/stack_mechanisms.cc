#include "planner/settings/stack_mechanisms.h"

#include <array>
#include <nlohmann/json.hpp>

#include "planner/settings/stack_resolvers.h"
#include "planner/settings/stack_traits.h"

namespace headroom::planner {
namespace {

Status not_a_choice(const MechanismRow& row, std::string_view text) {
  return Status::invalid_input("expected one of " + row.choices() + ", got '" + std::string(text) + "'");
}

// A setting with named choices: `Field` is RunSettings' optional override,
// `Parse` and `Name` its ChoiceTable's parser and names (settings/stack_choices.h).
template <auto Field, auto Parse, auto Name>
struct EnumSetting {
  static Status set(const MechanismRow& row, RunSettings& s, std::string_view text) {
    const auto parsed = Parse(text);
    if (!parsed) return not_a_choice(row, text);
    s.*Field = *parsed;
    return Status::ok();
  }
  static Status read(const MechanismRow& row, JsonFields& fields, RunSettings& s) {
    return fields.read_enum(row.key, s.*Field, Parse, row.choices());
  }
  static void write(const MechanismRow& row, const RunSettings& s, nlohmann::json& out) {
    if (s.*Field) out[row.key] = std::string(Name(*(s.*Field)));
  }
};

// A setting that is on or off: "on|off" on the command line, true or false in JSON.
template <std::optional<bool> RunSettings::*Field>
struct OnOffSetting {
  static Status set(const MechanismRow&, RunSettings& s, std::string_view text) {
    if (text != "on" && text != "off") {
      return Status::invalid_input("expected on or off, got '" + std::string(text) + "'");
    }
    s.*Field = text == "on";
    return Status::ok();
  }
  static Status read(const MechanismRow& row, JsonFields& fields, RunSettings& s) {
    return fields.read(row.key, s.*Field);
  }
  static void write(const MechanismRow& row, const RunSettings& s, nlohmann::json& out) {
    if (s.*Field) out[row.key] = *(s.*Field);
  }
};

std::string on_off() { return "on, off"; }

// "x" when the band's two ends agree, "bottom to top" when they do not.
std::string open_or(const std::string& top, const std::string& bottom) {
  return top == bottom ? top : bottom + " to " + top;
}

template <typename T, typename Name>
std::string band_words(std::string_view label, T StackSpec::*field, const ResolvedStack& r, Name name) {
  return std::string(label) + " " + open_or(std::string(name(r.top.*field)), std::string(name(r.bottom.*field)));
}

// The band's bottom of each mechanism, pinned where the run accepts the setting
// (validate_settings refuses it elsewhere).
template <auto Field, auto Spec>
void pin_always(const RunSettings&, const ResolvedStack& r, RunSettings& bottom) {
  bottom.*Field = r.bottom.*Spec;
}
void pin_compile_loss(const RunSettings& s, const ResolvedStack& r, RunSettings& bottom) {
  if (s.compile) bottom.compile_loss = r.bottom.compile_loss;
}
void pin_fsdp_no_sync(const RunSettings& s, const ResolvedStack& r, RunSettings& bottom) {
  if (shards_with_fsdp(s)) bottom.fsdp_no_sync = r.bottom.fsdp_no_sync;
}
void pin_kbit_prep(const RunSettings& s, const ResolvedStack& r, RunSettings& bottom) {
  if (s.mode == TrainMode::kQlora) bottom.kbit_prep = r.bottom.kbit_prep;
}
void pin_autocast(const RunSettings& s, const ResolvedStack& r, RunSettings& bottom) {
  if (autocast_matters(s)) bottom.autocast = r.bottom.autocast;
}
void pin_repeat_kv(const RunSettings&, const ResolvedStack& r, RunSettings& bottom) {
  if (r.repeat_kv_open) bottom.repeat_kv = r.bottom.repeat_kv;
}
void pin_rope_caches(const RunSettings&, const ResolvedStack& r, RunSettings& bottom) {
  if (r.layer_rope_caches_open) bottom.layer_rope_caches = false;
}

std::string no_words(const RunSettings&, const ResolvedStack&) { return ""; }
std::string liger_words(const RunSettings&, const ResolvedStack& r) {
  return r.top.liger_kernels ? "Liger's RMSNorm, SwiGLU and RoPE kernels" : "";
}

std::string optimizer_words(const RunSettings&, const ResolvedStack& r) {
  return band_words("optimizer step", &StackSpec::optimizer_impl, r, optimizer_impl_name);
}
std::string loss_words(const RunSettings&, const ResolvedStack& r) {
  return band_words("loss", &StackSpec::loss, r, loss_name);
}
std::string recompute_words(const RunSettings& s, const ResolvedStack& r) {
  if (s.checkpointing == CheckpointPolicy::kNone && r.top.recompute == r.bottom.recompute) return "";
  return band_words("checkpointed blocks recompute", &StackSpec::recompute, r, recompute_name) +
         (s.offload_checkpoint_inputs ? " with their inputs offloaded" : "");
}
std::string adapter_words(const RunSettings& s, const ResolvedStack& r) {
  if (s.mode == TrainMode::kFull || s.precision != Precision::kBf16Pure) return "";
  return band_words("adapters", &StackSpec::adapter_dtype, r, adapter_dtype_name);
}
// Said with the sharding it is about.
std::string no_sync_words(const RunSettings& s, const ResolvedStack& r) {
  if (s.zero_stage != 3 || !shards_with_fsdp(s)) return "";
  const std::string sharded = sharding_of(s) == Sharding::kFsdp1 ? "sharded by FSDP1" : "sharded by FSDP2";
  if (!s.accumulates()) return sharded;
  const bool top = r.top.fsdp_no_sync;
  const bool bottom = r.bottom.fsdp_no_sync;
  return sharded + (top == bottom ? (top ? " accumulating under no_sync" : " reducing every micro-step")
                                  : " reducing every micro-step to accumulating under no_sync");
}
std::string kbit_prep_words(const RunSettings& s, const ResolvedStack& r) {
  if (!kbit_prep_matters(s)) return "";
  return band_words("QLoRA preparation", &StackSpec::kbit_prep, r, kbit_prep_name);
}
std::string autocast_words(const RunSettings& s, const ResolvedStack& r) {
  if (!autocast_matters(s)) return "";
  return band_words("forward", &StackSpec::autocast, r,
                    [](bool on) { return on ? "under autocast" : "without autocast"; });
}

std::string reference_words(Reference reference) {
  switch (reference) {
    case Reference::kCopy: return "a frozen copy of the model";
    case Reference::kAdapterDisabled: return "the base with adapters disabled (no second copy)";
    case Reference::kPrecomputed: return "precomputed log-probs (no reference forward)";
    case Reference::kNone: return "none (beta 0)";
  }
  return "?";
}

// The recipe and, for DPO, the reference's treatment: "DPO, reference the adapter-disabled base".
std::string recipe_words(const RunSettings&, const ResolvedStack& r) {
  if (r.top.recipe == Recipe::kSupervised) return "";
  if (r.top.recipe == Recipe::kReward) {
    return "reward modelling (chosen and rejected rows in one batch, a one-value score head, no LM head)";
  }
  if (r.top.recipe == Recipe::kGrpo) {
    const bool generate = r.top.generation == Generation::kGenerate;
    return std::string("GRPO (generation") + (generate ? " with a KV cache" : "") +
           ", then the policy over prompt + completion, the completion scored), reference " +
           reference_words(r.top.reference);
  }
  return "DPO (chosen and rejected rows in one batch), reference " + reference_words(r.top.reference);
}
std::string generation_words(const RunSettings&, const ResolvedStack& r) {
  if (r.top.recipe != Recipe::kGrpo) return "";
  switch (r.top.generation) {
    case Generation::kGenerate: return "generation by transformers' generate";
    case Generation::kVllmColocate: return "generation by vLLM colocated (its share held all step)";
    case Generation::kVllmColocateSleep: return "generation by vLLM colocated in sleep mode (its share in generation only)";
    case Generation::kVllmServer: return "generation by a vLLM server on other GPUs";
  }
  return "";
}
void pin_generation(const RunSettings& s, const ResolvedStack& r, RunSettings& bottom) {
  if (s.recipe == Recipe::kGrpo) bottom.generation = r.bottom.generation;
}
void pin_reference(const RunSettings& s, const ResolvedStack& r, RunSettings& bottom) {
  if (s.recipe == Recipe::kDpo || s.recipe == Recipe::kGrpo) bottom.reference = r.bottom.reference;
}

using Pin = void (*)(const RunSettings&, const ResolvedStack&, RunSettings&);
using Words = std::string (*)(const RunSettings&, const ResolvedStack&);

template <auto Field, auto Parse, auto Name>
constexpr MechanismRow enum_row(const char* key, const char* value_name, const char* help, std::string (*choices)(),
                                void (*resolve)(const RunSettings&, ResolvedStack&), Pin pin, Words words) {
  using Setting = EnumSetting<Field, Parse, Name>;
  return {key, value_name, help, choices, Setting::set, Setting::read, Setting::write, resolve, pin, words};
}

template <std::optional<bool> RunSettings::*Field>
constexpr MechanismRow on_off_row(const char* key, const char* help,
                                  void (*resolve)(const RunSettings&, ResolvedStack&), Pin pin, Words words) {
  using Setting = OnOffSetting<Field>;
  return {key, "on|off", help, on_off, Setting::set, Setting::read, Setting::write, resolve, pin, words};
}

// The rows, in the order resolve_stack runs them (docs/stacks.md cites each
// stack's source in its table, settings/stack_resolvers.cc in its comments).
const std::array<MechanismRow, 16> kMechanisms = {{
    enum_row<&RunSettings::optimizer_impl, parse_optimizer_impl, optimizer_impl_name>(
        "optimizer_impl", "IMPL", "how optimizer.step() runs", optimizer_impl_names, resolve_optimizer_impl,
        pin_always<&RunSettings::optimizer_impl, &StackSpec::optimizer_impl>, optimizer_words),
    enum_row<&RunSettings::loss, parse_loss, loss_name>(
        "loss", "KIND",
        "the LM loss (chunked:N: torchtune's N chunks; upcast-shift: transformers < 4.49; fused-linear-ce: Liger)",
        loss_names, resolve_loss, pin_always<&RunSettings::loss, &StackSpec::loss>, loss_words),
    enum_row<&RunSettings::recompute, parse_recompute, recompute_name>(
        "recompute", "KIND",
        "what a checkpointed block keeps (block: its inputs only; block-reentrant: the same with "
        "use_reentrant=True, where a block none of whose inputs requires grad trains nothing; selective-op: "
        "torchtitan's op-level selective AC, also every other matmul output and the attention output)",
        recompute_names, resolve_recompute, pin_always<&RunSettings::recompute, &StackSpec::recompute>,
        recompute_words),
    enum_row<&RunSettings::adapter_dtype, parse_adapter_dtype, adapter_dtype_name>(
        "adapter_dtype", "DTYPE", "LoRA adapters' dtype under pure bf16 (fp32: PEFT; model: torchtune, litgpt)",
        adapter_dtype_names, resolve_adapter_dtype,
        pin_always<&RunSettings::adapter_dtype, &StackSpec::adapter_dtype>, adapter_words),
    on_off_row<&RunSettings::compile_loss>(
        "compile_loss",
        "with --compile: torch.compile covers the loss too (on: no fp32 copy of the logits; the 16-bit logits and "
        "two fp32 numbers per token are saved) or not (off)",
        resolve_compile_loss, pin_compile_loss, no_words),
    on_off_row<&RunSettings::fsdp_no_sync>(
        "fsdp_no_sync",
        "FSDP at --zero 3 with accumulation: the micro-steps before the last run in no_sync (on: each unit keeps "
        "its unsharded gradient, as the Trainer and Accelerate do) or reduce-scatter every micro-step (off: "
        "torchtune, torchtitan, Composer)",
        resolve_fsdp_no_sync, pin_fsdp_no_sync, no_sync_words),
    enum_row<&RunSettings::kbit_prep, parse_kbit_prep, kbit_prep_name>(
        "kbit_prep", "KIND",
        "QLoRA over bitsandbytes: what the script does to the weights left unquantized, the embeddings, norms and "
        "output layer (none: trained as loaded, axolotl, TRL >= 0.26; norms-fp32: TRL 0.7.5-0.25 with bf16, "
        "artidoro/qlora; peft: PEFT's prepare_model_for_kbit_training, all fp32)",
        kbit_prep_names, resolve_kbit_prep, pin_kbit_prep, kbit_prep_words),
    on_off_row<&RunSettings::autocast>(
        "autocast",
        "precision bf16 (or FSDP's mixed precision at --zero 3): whether the forward runs under torch.autocast "
        "over the 16-bit weights (on: transformers' Trainer, Accelerate, the diffusers scripts, Composer: "
        "LayerNorm and softmax give fp32, fp32 adapters are cast per matmul; off: torchtune, litgpt, a plain loop)",
        resolve_autocast, pin_autocast, autocast_words),
    on_off_row<&RunSettings::repeat_kv>(
        "repeat_kv",
        "attention sdpa over grouped K/V: whether K and V are copied to every head first (on: transformers before "
        "4.54, repeat_kv; off: SDPA's enable_gqa)",
        resolve_repeat_kv, pin_repeat_kv, no_words),
    on_off_row<&RunSettings::layer_rope_caches>(
        "layer_rope_caches",
        "whether every attention layer keeps its own RoPE cos/sin cache over the maximum positions (on: "
        "transformers before 4.45 for Qwen2 and GPT-NeoX, torchtune's lora_ builders; off: computed per forward, "
        "or torchtune's one shared cache; docs/models.md)",
        resolve_rope_modules, pin_rope_caches, no_words),
    on_off_row<&RunSettings::input_require_grads>(
        "input_require_grads",
        "LoRA with checkpointing: whether a hook makes the frozen input embeddings' output require grad, so the "
        "embeddings block records its graph (on: transformers' Trainer from 5.x for models whose main input is "
        "input_ids, enable_input_require_grads; off: transformers 4.x, other stacks)",
        resolve_input_require_grads,
        pin_always<&RunSettings::input_require_grads, &StackSpec::input_require_grads>, no_words),
    on_off_row<&RunSettings::grads_through_forward>(
        "grads_through_forward",
        "whether the previous step's gradients live through the next forward (on: the loop calls zero_grad "
        "between the loss and backward(), as torchvision's classification reference; off: zero_grad after the "
        "step or before the forward, as the Trainer, torchtune, litgpt, torchtitan and the diffusers scripts)",
        resolve_grads_through_forward,
        pin_always<&RunSettings::grads_through_forward, &StackSpec::grads_through_forward>, no_words),
    enum_row<&RunSettings::recipe, parse_recipe, recipe_name>(
        "recipe", "KIND",
        "what the step trains for (supervised: the model's own loss; dpo: TRL's DPOTrainer, a chosen and a "
        "rejected row per sample in one batch and a reference model's log-probs; reward: TRL's RewardTrainer, "
        "the same pairs through a one-value score head instead of the LM head; grpo: TRL's GRPOTrainer, generation "
        "then the policy over prompt + completion, --seq the prompt and --completion-tokens together)",
        recipe_names, resolve_recipe, pin_always<&RunSettings::recipe, &StackSpec::recipe>, recipe_words),
    on_off_row<&RunSettings::liger_kernels>(
        "liger_kernels",
        "Liger's Triton RMSNorm, SwiGLU and RoPE in the model (on: the Trainer's use_liger_kernel, "
        "apply_liger_kernel_to_*: the norm keeps its input and an fp32 rstd, SiLU-times-up keeps the gate and up "
        "projections only, RoPE rotates q and k in place; off: the model's own modules). The fused loss is --loss "
        "fused-linear-ce",
        resolve_liger_kernels, pin_always<&RunSettings::liger_kernels, &StackSpec::liger_kernels>, liger_words),
    enum_row<&RunSettings::reference, parse_reference, reference_name>(
        "reference", "KIND",
        "with --recipe dpo: the reference model (copy: a frozen second model, TRL's default without PEFT; "
        "adapter-disabled: the LoRA policy's base, TRL's default with PEFT; precomputed: "
        "precompute_ref_log_probs, no reference forward in the step); with --recipe grpo: none (beta 0, TRL's "
        "default), copy or adapter-disabled (beta > 0: TRL takes the copy without PEFT, the adapter-disabled "
        "base with it, whichever is given)",
        reference_names, resolve_reference, pin_reference, no_words),
    // GRPO's generation engine (planner/mechanisms/vllm_engine.h).
    enum_row<&RunSettings::generation, parse_generation, generation_name>(
        "generation", "KIND",
        "with --recipe grpo: where the completions are generated (generate: transformers' generate on the policy, "
        "TRL's default; vllm-colocate: vLLM in the trainer's process holding --vllm-gpu-memory-utilization of the "
        "GPU all step; vllm-colocate-sleep: the same with vllm_enable_sleep_mode, the share taken for generation "
        "only; vllm-server: a `trl vllm-serve` process on other GPUs)",
        generation_names, resolve_generation, pin_generation,
        generation_words),
}};

}  // namespace

std::span<const MechanismRow> stack_mechanisms() { return kMechanisms; }

std::string mechanism_flag(const MechanismRow& row) {
  std::string flag = std::string("--") + row.key;
  for (char& c : flag) {
    if (c == '_') c = '-';
  }
  return flag;
}

std::string mechanism_help(const MechanismRow& row) {
  const std::string choices = row.choices == on_off ? "" : "; one of " + row.choices();
  return std::string(row.help) + choices + "; default: as the stack and --versions do (docs/stacks.md)";
}

}  // namespace headroom::planner
