// find_plan: the search over global configurations (candidate_search.h) at the
// run's budget and around it, from which come the plan, the frontier, the largest
// micro-batch and sequence length, and what would make an infeasible run fit.
#include <algorithm>
#include <optional>

#include "planner/predict/planner.h"
#include "planner/search/candidate_search.h"

namespace headroom::planner {
namespace {

std::vector<FrontierPoint> pareto(std::vector<FrontierPoint> points) {
  std::sort(points.begin(), points.end(), [](const FrontierPoint& a, const FrontierPoint& b) {
    if (a.gpu_total != b.gpu_total) return a.gpu_total < b.gpu_total;
    return a.sample_ms < b.sample_ms;
  });
  std::vector<FrontierPoint> out;
  for (const FrontierPoint& point : points) {
    if (out.empty() || point.sample_ms < out.back().sample_ms) out.push_back(point);
  }
  return out;
}

std::vector<Suggestion> suggestions_for(const ModelContext& context, const RunSettings& settings);
std::vector<Suggestion> budget_suggestions(const RunSettings& settings, const Plan& gpu_only);

// Batches of varied length (RunSettings::shortest_sample) cost the simulator 256
// micro-batches per prediction: the search prices candidates with every batch at
// seq_len, and the plan it finds is replayed with varied batches; where those run
// out of memory, the search runs again with less room (at most 3 times).
Candidate search_for_varied_lengths(PlanContexts& contexts, const RunSettings& settings,
                                    const RunSettings& searched, SearchOptions options,
                                    std::vector<FrontierPoint>* points, int* evaluated, const Progress& progress) {
  Candidate best = search_candidates(contexts, searched, options, points, evaluated, progress);
  if (!settings.shortest_sample) return best;
  const auto replay = [&](Plan& plan) {
    plan.settings.shortest_sample = settings.shortest_sample;
    const PricedContext* priced = contexts.context_for(plan.settings);
    if (priced == nullptr) return false;
    plan.prediction = predict(priced->context, plan.settings, plan.config, plan.blocks);
    return !plan.prediction.simulated_out_of_memory;
  };
  for (int attempt = 0; attempt < 3 && best.found; ++attempt) {
    if (replay(best.plan)) return best;
    options.budget -= options.budget / 10;
    best = search_candidates(contexts, searched, options, nullptr, evaluated, {});
  }
  if (best.found) best.found = replay(best.plan);
  return best;
}

// The plan's prediction as prepare_plan (plan_file.h) gives it from the plan
// file: in its own context, with the allocator simulated (`reprice`: where the
// search priced it with the block walk alone) and the band.
void finish_prediction(PlanContexts& contexts, Plan& plan, bool reprice) {
  if (plan.model.empty()) return;
  const PricedContext* priced = contexts.context_for(plan.settings);
  if (priced == nullptr) return;
  if (reprice) plan.prediction = predict(priced->context, plan.settings, plan.config, plan.blocks);
  plan.prediction = with_band(priced->context, plan.settings, plan.config, plan.blocks, plan.prediction);
}

}  // namespace

PlanResult find_plan(const ModelContext& context, const RunSettings& given, const Progress& progress) {
  PlanResult result;
  std::vector<FrontierPoint> points;
  RunSettings settings = given;
  settings.shortest_sample.reset();
  SearchOptions options = search_options(context, settings, micro_batch_candidates(settings));
  PlanContexts contexts;
  Candidate best =
      search_for_varied_lengths(contexts, given, settings, options, &points, &result.configs_evaluated, progress);
  // The frontier below the budget (what saving memory costs) and beyond it (what
  // more memory would buy), from the block walk alone.
  for (double factor : {0.4, 0.55, 0.7, 0.85, 1.0, 1.25, 1.5, 2.0, 4.0}) {
    SearchOptions wider = widened(options, factor);
    wider.simulate_allocator = false;
    search_candidates(contexts, settings, wider, &points, &result.configs_evaluated, {});
  }
  result.frontier = pareto(std::move(points));
  result.found = best.found;
  if (best.found) {
    result.best = std::move(best.plan);
    finish_prediction(contexts, result.best, false);
  } else if (best.gpu_only) {
    // The GPU is not what is short: no wider GPU search, and suggestions for
    // the budget that is.
    result.best = std::move(best.gpu_only_plan);
    finish_prediction(contexts, result.best, false);
    if (!result.best.prediction.fits_host) result.short_of.push_back("host RAM");
    if (!result.best.prediction.fits_disk) result.short_of.push_back("disk");
    result.suggestions = budget_suggestions(settings, result.best);
  } else {
    // The plan closest to fitting: the fastest one under the smallest larger
    // budget that has one, to show how far off the run is.
    for (double factor : {1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 8.0, 16.0, 64.0}) {
      SearchOptions wider = widened(options, factor);
      // The allocator simulation checks against the real GPU, which this plan
      // exceeds by design: the block walk alone, as for the frontier.
      wider.simulate_allocator = false;
      Candidate near = search_candidates(contexts, settings, wider, nullptr, nullptr, {});
      if (near.found || near.gpu_only) {
        result.best = std::move(near.found ? near.plan : near.gpu_only_plan);
        finish_prediction(contexts, result.best, true);
        break;
      }
    }
    result.short_of.push_back("GPU memory");
    if (!result.best.model.empty() && !result.best.prediction.fits_host) result.short_of.push_back("host RAM");
    if (!result.best.model.empty() && !result.best.prediction.fits_disk) result.short_of.push_back("disk");
    result.suggestions = suggestions_for(context, settings);
  }
  // Up to the documented maximum: sizes are validated to fit int64 only that far.
  result.max_micro_batch =
      largest_fitting(kMaxMicroBatch, [&](int64_t mb) { return fits_at(context, settings, mb, context.seq_len); });
  result.max_seq_len = largest_fitting(context.graph.sequence.max_seq,
                               [&](int64_t seq) { return fits_at(context, settings, 1, seq); });
  return result;
}

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

std::vector<Suggestion> suggestions_for(const ModelContext& context, const RunSettings& settings) {
  std::vector<Suggestion> out;
  const auto add = [&](std::optional<Suggestion> suggestion) {
    if (suggestion) out.push_back(std::move(*suggestion));
  };
  add(more_gpus(context, settings));
  add(larger_gpu(context, settings));
  add(fewer_trainable(settings));
  add(allow_offload(settings));
  add(shorter_sequence(context, settings));
  return out;
}

}  // namespace

}  // namespace headroom::planner
