#include "planner/search/suggestions.h"

#include <algorithm>
#include <optional>

#include "planner/search/candidate_search.h"
#include "planner/settings/may_change.h"

namespace headroom::planner {
namespace {

Suggestion suggestion_from(const std::string& change, const Candidate& found, const RunSettings& settings) {
  Suggestion s;
  s.change = change;
  s.gpu_total = found.plan.prediction.gpu_total;
  s.gpu_budget = found.plan.prediction.gpu_budget;
  s.sample_ms = found.sample_ms;
  s.detail = "fits with ZeRO-" + std::to_string(found.plan.config.zero_stage) +
             ", optimizer offload " + std::string(offload_name(found.plan.config.offload_optimizer)) +
             ", micro-batch " + std::to_string(found.plan.config.micro_batch) + " on " +
             std::to_string(settings.world_size()) + " GPU(s)";
  return s;
}

Candidate try_settings(const RunSettings& changed) {
  Result<ModelContext> context = prepare_context(changed);
  if (!context.is_ok()) return {};
  SearchOptions options = search_options(context.value(), changed, micro_batch_candidates(changed));
  PlanContexts contexts;
  return search_candidates(contexts, changed, options, nullptr, nullptr, {});
}

// More GPUs of the same kind, with ZeRO-3 allowed: the fewest that are enough.
std::optional<Suggestion> more_gpus(const ModelContext& context, const RunSettings& settings) {
  for (int gpus : {2, 4, 8, 16, 32, 64}) {
    if (gpus <= settings.world_size()) continue;
    RunSettings changed = settings;
    changed.gpus_per_node = std::min(gpus, 8);
    changed.nodes = gpus / changed.gpus_per_node;
    changed.max_zero_stage = 3;
    changed.global_batch = 0;
    const Candidate found = try_settings(changed);
    if (found.found) return suggestion_from(std::to_string(gpus) + " x " + context.gpu.name, found, changed);
  }
  return std::nullopt;
}

// A larger GPU, the smallest one that is enough.
std::optional<Suggestion> larger_gpu(const ModelContext& context, const RunSettings& settings) {
  std::vector<GpuSpec> larger;
  for (const GpuSpec& gpu : gpu_catalogue()) {
    if (gpu.memory_bytes > context.gpu.memory_bytes) larger.push_back(gpu);
  }
  std::stable_sort(larger.begin(), larger.end(),
                   [](const GpuSpec& a, const GpuSpec& b) { return a.memory_bytes < b.memory_bytes; });
  for (const GpuSpec& gpu : larger) {
    RunSettings changed = settings;
    changed.gpu = gpu.id;
    changed.gpu_spec.reset();
    changed.gpu_memory_bytes.reset();
    const Candidate found = try_settings(changed);
    if (found.found) return suggestion_from("one " + gpu.name, found, changed);
  }
  return std::nullopt;
}

// Fewer trainable parameters: LoRA or QLoRA for a full run, QLoRA for LoRA.
std::optional<Suggestion> fewer_trainable(const RunSettings& settings) {
  if (settings.mode == TrainMode::kFull) {
    for (TrainMode mode : {TrainMode::kLora, TrainMode::kQlora}) {
      RunSettings changed = settings;
      changed.mode = mode;
      const Candidate found = try_settings(changed);
      if (found.found) {
        return suggestion_from(std::string(mode_name(mode)) + " (rank " + std::to_string(changed.lora.rank) + ")",
                               found, changed);
      }
    }
  } else if (settings.mode == TrainMode::kLora) {
    RunSettings changed = settings;
    changed.mode = TrainMode::kQlora;
    const Candidate found = try_settings(changed);
    if (found.found) return suggestion_from("qlora (4-bit NF4 base)", found, changed);
  }
  return std::nullopt;
}

// Offload the user had ruled out.
std::optional<Suggestion> allow_offload(const RunSettings& settings) {
  if (settings.allow_cpu_offload && settings.allow_activation_offload && settings.max_zero_stage >= 3) {
    return std::nullopt;
  }
  RunSettings changed = settings;
  changed.allow_cpu_offload = true;
  changed.allow_activation_offload = true;
  changed.max_zero_stage = 3;
  const Candidate found = try_settings(changed);
  if (!found.found) return std::nullopt;
  return suggestion_from("allow ZeRO-3 and CPU offload", found, changed);
}

// A shorter sequence: the longest that fits at micro-batch 1.
std::optional<Suggestion> shorter_sequence(const ModelContext& context, const RunSettings& settings) {
  const int64_t seq = largest_fitting(context.seq_len, [&](int64_t s) { return fits_at(context, settings, 1, s); });
  if (seq <= 0 || seq >= context.seq_len) return std::nullopt;
  Suggestion s;
  s.change = "sequence length " + std::to_string(seq) + " (from " + std::to_string(context.seq_len) + ")";
  s.detail = "the longest sequence that fits at micro-batch 1 with the allowed options";
  return s;
}

// `changed` offered as `change` when its search finds a plan that fits (and,
// with `best_ms`, is faster per sample by 2% or more), its detail led by `what`.
std::optional<Suggestion> offered(const std::string& change, const RunSettings& changed, const std::string& what,
                                  std::optional<double> best_ms) {
  const Candidate found = try_settings(changed);
  if (!found.found || (best_ms && found.sample_ms >= *best_ms * 0.98)) return std::nullopt;
  Suggestion s = suggestion_from(change, found, changed);
  s.detail = what + "; " + s.detail;
  return s;
}

// The same run with every knob (may_change all), where its space has fewer: what
// editing the training code would buy.
std::optional<Suggestion> every_knob(const RunSettings& settings, std::optional<double> best_ms) {
  const KnobSet space = knobs_for(settings);
  RunSettings changed = settings;
  changed.may_change = {"all"};
  // Every knob the allow_* settings leave.
  const KnobSet wider = knobs_for(changed);
  if (space.bits == wider.bits) return std::nullopt;
  return offered("--may-change all", changed,
                 "also " + knobs_in_words(KnobSet{wider.bits & ~space.bits}) + ", which the " +
                     std::string(stack_name(settings.stack)) +
                     " stack does not change without editing the training code (--emit torch writes the wrappers)",
                 best_ms);
}

// A loss that keeps no logits: Liger's fused linear cross-entropy (docs/stacks.md,
// "The loss"), where the run's loss is another and it makes a difference.
std::optional<Suggestion> fused_loss(const RunSettings& settings, std::optional<double> best_ms) {
  const LossSpec fused{LossImpl::kFusedLinearCe, 8};
  if (settings.loss && *settings.loss == fused) return std::nullopt;
  RunSettings changed = settings;
  changed.loss = fused;
  return offered("--loss fused-linear-ce", changed,
                 "a loss that keeps no logits: Liger's fused linear cross-entropy (the Trainer's "
                 "use_liger_kernel=True with liger-kernel installed)",
                 best_ms);
}

// 8-bit AdamW states (bitsandbytes), a change to the optimization itself: offered
// only when nothing fits.
std::optional<Suggestion> eight_bit_optimizer(const RunSettings& settings) {
  if (settings.optimizer != OptimizerKind::kAdamW) return std::nullopt;
  RunSettings changed = settings;
  changed.optimizer = OptimizerKind::kAdamW8bit;
  return offered("--optimizer adamw8bit", changed,
                 "bitsandbytes' 8-bit AdamW states (the Trainer's optim=adamw_bnb_8bit)", std::nullopt);
}

}  // namespace

// When a plan fits the GPU but not host RAM or disk: the budget that would
// hold it, and the changes that make it need less of what is short.
std::vector<Suggestion> budget_suggestions(const RunSettings& settings, const Plan& gpu_only) {
  std::vector<Suggestion> out;
  const Prediction& p = gpu_only.prediction;
  auto try_change = [&](const std::string& change, const RunSettings& changed) {
    const Candidate found = try_settings(changed);
    if (found.found) out.push_back(suggestion_from(change, found, changed));
  };
  if (!p.fits_host) {
    Suggestion given;
    given.change = "--host-ram " + std::to_string((p.host_ram + (int64_t{1} << 30) - 1) >> 30) + "GiB";
    given.detail = "the plan's host RAM need per node" +
                   std::string(!settings.host_ram_bytes
                                   ? " (the budget of 128 GiB was assumed: give the machine's real host RAM)"
                                   : "");
    out.push_back(given);
    // Host RAM is per node: the same GPUs over more nodes need less of it each.
    if (settings.gpus_per_node > 8) {
      RunSettings changed = settings;
      changed.nodes = settings.world_size() / 8;
      changed.gpus_per_node = 8;
      if (changed.world_size() == settings.world_size()) {
        try_change(std::to_string(changed.nodes) + " nodes of 8 GPUs (--gpus 8 --nodes " + std::to_string(changed.nodes) +
                       ")",
                   changed);
      }
    }
    if (settings.allow_cpu_offload && gpu_only.config.offload_optimizer != Offload::kNone) {
      RunSettings changed = settings;
      changed.allow_cpu_offload = false;
      try_change("no optimizer offload to host RAM (--no-offload)", changed);
    }
    // Fewer or smaller optimizer states need less of the host RAM they are offloaded to.
    if (std::optional<Suggestion> fewer = fewer_trainable(settings)) out.push_back(std::move(*fewer));
    if (std::optional<Suggestion> eight_bit = eight_bit_optimizer(settings)) out.push_back(std::move(*eight_bit));
  }
  if (!p.fits_disk) {
    Suggestion given;
    given.change = "--disk " + std::to_string((p.disk + 999'999'999) / 1'000'000'000) + "GB";
    given.detail = "the disk the plan's checkpoints need" +
                   std::string(!settings.disk_free_bytes
                                   ? " (500 GB was assumed: give the real free space)"
                                   : "");
    out.push_back(given);
    if (settings.checkpoints_kept > 1) {
      RunSettings changed = settings;
      changed.checkpoints_kept = 1;
      try_change("keep one training-state checkpoint (--keep-checkpoints 1)", changed);
    }
    if (settings.save_optimizer_state) {
      RunSettings changed = settings;
      changed.save_optimizer_state = false;
      try_change("checkpoints without optimizer state (--no-optimizer-state)", changed);
    }
  }
  return out;
}

std::vector<Suggestion> suggestions_for(const ModelContext& context, const RunSettings& settings) {
  std::vector<Suggestion> out;
  const auto add = [&](std::optional<Suggestion> suggestion) {
    if (suggestion) out.push_back(std::move(*suggestion));
  };
  add(more_gpus(context, settings));
  add(larger_gpu(context, settings));
  add(fewer_trainable(settings));
  add(allow_offload(settings));
  add(every_knob(settings, std::nullopt));
  add(fused_loss(settings, std::nullopt));
  add(eight_bit_optimizer(settings));
  add(shorter_sequence(context, settings));
  return out;
}

std::vector<Suggestion> beyond_the_space(const RunSettings& settings, double best_ms) {
  std::vector<Suggestion> out;
  if (std::optional<Suggestion> wider = every_knob(settings, best_ms)) out.push_back(std::move(*wider));
  if (std::optional<Suggestion> loss = fused_loss(settings, best_ms)) out.push_back(std::move(*loss));
  return out;
}

}  // namespace headroom::planner
