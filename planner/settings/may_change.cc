#include "planner/settings/may_change.h"

#include <array>

#include "planner/settings/run_settings.h"

namespace headroom::planner {
namespace {

struct KnobName {
  Knob knob;
  const char* name;
  const char* words;
};

constexpr std::array<KnobName, 8> kKnobNames = {{
    {Knob::kCheckpointing, "checkpointing", "gradient checkpointing of every block or none"},
    {Knob::kCheckpointEvery, "checkpoint-every", "checkpointing of every N-th block"},
    {Knob::kCheckpointBlocks, "checkpoint-blocks", "checkpointing of any set of blocks"},
    {Knob::kActivationOffload, "activation-offload", "activation offload of any set of blocks"},
    {Knob::kMicroBatch, "micro-batch", "micro-batch and accumulation (the global batch kept)"},
    {Knob::kZero, "zero", "the ZeRO or FSDP sharding stage"},
    {Knob::kOffload, "offload", "optimizer and parameter offload to the CPU"},
    {Knob::kNvme, "nvme", "NVMe offload"},
}};

KnobSet knobs(std::initializer_list<Knob> list) {
  KnobSet out;
  for (Knob knob : list) out.add(knob);
  return out;
}

}  // namespace

KnobSet all_knobs() {
  KnobSet out;
  for (const KnobName& entry : kKnobNames) out.add(entry.knob);
  return out;
}

CheckpointGranularity checkpoint_granularity(KnobSet set) {
  if (set.has(Knob::kCheckpointBlocks)) return CheckpointGranularity::kPerBlock;
  if (set.has(Knob::kCheckpointEvery)) return CheckpointGranularity::kEveryNth;
  if (set.has(Knob::kCheckpointing)) return CheckpointGranularity::kAllOrNone;
  return CheckpointGranularity::kAsGiven;
}

// Each row's source is in docs/stacks.md, "What a plan may change".
KnobSet stack_knobs(Stack stack) {
  using enum Knob;
  switch (stack) {
    // TrainingArguments: gradient_checkpointing (every layer: modeling_utils.py
    // gradient_checkpointing_enable), per_device_train_batch_size and
    // gradient_accumulation_steps, a DeepSpeed config or fsdp/fsdp_config.
    case Stack::kHfTrainer: return knobs({kCheckpointing, kMicroBatch, kZero, kOffload, kNvme});
    // A DeepSpeed script: ds_config (train_micro_batch_size_per_gpu, zero_optimization
    // with offload); checkpointing is the script's one switch (gradient_checkpointing_enable).
    case Stack::kDeepspeed: return knobs({kCheckpointing, kMicroBatch, kZero, kOffload, kNvme});
    // torchtune: enable_activation_checkpointing wraps every TransformerSelfAttentionLayer
    // (training.set_activation_checkpointing); batch_size, gradient_accumulation_steps;
    // the distributed recipes' FSDP2 (fsdp_reshard_after_forward, fsdp_cpu_offload).
    case Stack::kTorchtune: return knobs({kCheckpointing, kMicroBatch, kZero, kOffload});
    // litgpt's finetune scripts fix the strategy (FSDPStrategy with
    // activation_checkpointing_policy={Block}, cpu_offload=False, on more than one
    // device): micro_batch_size against global_batch_size is theirs to change.
    case Stack::kLitgpt: return knobs({kMicroBatch});
    // torchtitan: activation_checkpoint.mode and selective_ac_option N (every N-th
    // block, parallelize.py _apply_ac_to_transformer_block), local_batch_size against
    // global_batch_size, fsdp_reshard_after_forward, training.enable_cpu_offload.
    case Stack::kTorchtitan: return knobs({kCheckpointEvery, kMicroBatch, kZero, kOffload});
    // llm-foundry on Composer: fsdp_config activation_checkpointing (every block),
    // device_train_microbatch_size, sharding_strategy, cpu_offload.
    case Stack::kComposer: return knobs({kCheckpointing, kMicroBatch, kZero, kOffload});
    // Unsloth: get_peft_model's use_gradient_checkpointing (every layer) and the
    // SFTConfig's per_device_train_batch_size; one GPU (validate_unsloth.h).
    case Stack::kUnsloth: return knobs({kCheckpointing, kMicroBatch});
    // A plain loop or an unnamed stack: what headroom's torch export applies
    // (per-block checkpoint and save_on_cpu wrappers, with the DeepSpeed config).
    case Stack::kTorchAmp:
    case Stack::kUnspecified: return all_knobs();
  }
  return all_knobs();
}

Result<KnobSet> knobs_of(const RunSettings& settings, std::string_view origin) {
  if (settings.may_change.empty()) return stack_knobs(settings.stack);
  KnobSet out;
  for (const std::string& name : settings.may_change) {
    if (name == "stack") {
      out.bits |= stack_knobs(settings.stack).bits;
      continue;
    }
    if (name == "all") {
      out.bits |= all_knobs().bits;
      continue;
    }
    bool known = false;
    for (const KnobName& entry : kKnobNames) {
      if (name != entry.name) continue;
      out.add(entry.knob);
      known = true;
    }
    if (!known) {
      return Status::invalid_input(std::string(origin) + ": may_change: unknown \"" + name + "\" (expected " +
                                   knob_names() + ")");
    }
  }
  return out;
}

std::string knob_names() {
  std::string out = "stack, all";
  for (const KnobName& entry : kKnobNames) out += std::string(", ") + entry.name;
  return out;
}

std::string knobs_in_words(KnobSet set) {
  std::string out;
  // The finest checkpointing knob says it all.
  const CheckpointGranularity granularity = checkpoint_granularity(set);
  for (const KnobName& entry : kKnobNames) {
    if (!set.has(entry.knob)) continue;
    const bool coarser_checkpointing =
        (entry.knob == Knob::kCheckpointing && granularity != CheckpointGranularity::kAllOrNone) ||
        (entry.knob == Knob::kCheckpointEvery && granularity == CheckpointGranularity::kPerBlock);
    if (coarser_checkpointing) continue;
    out += (out.empty() ? "" : ", ") + std::string(entry.words);
  }
  return out.empty() ? "nothing" : out;
}

KnobSet knobs_for(const RunSettings& settings) {
  // Validated with the settings (validate_settings): a refusal cannot reach here.
  Result<KnobSet> given = knobs_of(settings, "settings");
  KnobSet knobs = given.is_ok() ? given.value() : KnobSet{};
  // The older allow_* settings narrow the space further.
  const auto drop = [&](Knob knob, bool allowed) {
    if (!allowed) knobs.bits &= ~static_cast<unsigned>(knob);
  };
  drop(Knob::kMicroBatch, settings.allow_micro_batch_change);
  drop(Knob::kActivationOffload, settings.allow_activation_offload);
  drop(Knob::kOffload, settings.allow_cpu_offload);
  drop(Knob::kNvme, settings.allow_nvme_offload);
  drop(Knob::kZero, settings.max_zero_stage > 0 || settings.zero_stage > 0);
  return knobs;
}

}  // namespace headroom::planner
