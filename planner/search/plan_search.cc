// find_plan: enumerates the global choices, solves the blocks exactly for each,
// and derives the frontier, the largest micro-batch and sequence length, and
// what would make an infeasible run fit.
#include <algorithm>
#include <cmath>
#include <map>

#include "planner/search/block_solver.h"
#include "planner/predict/planner.h"
#include "planner/predict/step_builder.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

// At most `limit` of the ascending `values`: all of them when they are few,
// else the first, the last and those nearest to a geometric spread between
// (each search costs a prediction per configuration: a per-GPU batch of
// 720720 has 240 divisors up to 1024, which took minutes; issue 14).
std::vector<int64_t> spread(const std::vector<int64_t>& values, size_t limit) {
  if (values.size() <= limit) return values;
  std::vector<int64_t> out;
  const double first = std::log(static_cast<double>(values.front()));
  const double last = std::log(static_cast<double>(values.back()));
  for (size_t i = 0; i < limit; ++i) {
    const double target = first + (last - first) * static_cast<double>(i) / static_cast<double>(limit - 1);
    const auto nearest = std::min_element(values.begin(), values.end(), [&](int64_t a, int64_t b) {
      return std::fabs(std::log(static_cast<double>(a)) - target) < std::fabs(std::log(static_cast<double>(b)) - target);
    });
    if (out.empty() || out.back() != *nearest) out.push_back(*nearest);
  }
  return out;
}

// Divisors of the per-rank batch, ascending: the micro-batches that keep the
// global batch exact with whole accumulation steps.
std::vector<int64_t> micro_batch_candidates(const RunSettings& settings) {
  if (!settings.allow_micro_batch_change) return {settings.micro_batch};
  const int64_t per_rank = settings.effective_global_batch() / settings.world_size();
  // An optimizer stepped in backward cannot accumulate (torchtune refuses
  // optimizer_in_bwd with gradient_accumulation_steps > 1): the whole per-rank
  // batch is the micro-batch.
  if (settings.optimizer_impl == OptimizerImpl::kInBackward) return {std::min(per_rank, kMaxMicroBatch)};
  std::vector<int64_t> out;
  for (int64_t mb = 1; mb <= per_rank && mb <= kMaxMicroBatch; ++mb) {
    if (per_rank % mb == 0) out.push_back(mb);
  }
  if (out.empty()) out.push_back(settings.micro_batch);
  return spread(out, kMaxMicroBatchCandidates);
}

// ZeRO stage and offload combinations DeepSpeed accepts, within what the user allows.
std::vector<GlobalConfig> global_candidates(const RunSettings& settings, int64_t micro_batch) {
  std::vector<GlobalConfig> out;
  const int64_t per_rank = settings.effective_global_batch() / settings.world_size();
  // QLoRA's 4-bit weights are not partitioned by ZeRO-3 in the bitsandbytes +
  // DeepSpeed stack our users run (the LLaVA QLoRA story hit "tensors not on the
  // same GPU" with ZeRO-3 and moved to ZeRO-2), so the planner stops at stage 2.
  int max_stage = settings.mode == TrainMode::kQlora ? std::min(settings.max_zero_stage, 2) : settings.max_zero_stage;
  // In-backward steps each gradient where it is produced: no ZeRO partitioning, no offload.
  const bool in_backward = settings.optimizer_impl == OptimizerImpl::kInBackward;
  if (in_backward) max_stage = 0;
  // fp8 all-gather is FSDP2's at stage 3: the graph was built for it.
  // A whole-model FSDP1 unit is how the run's config shards (MMEngine's
  // MMFullyShardedDataParallel, Accelerate's NO_WRAP): the plan keeps that
  // wrapper and chooses its CPU offload.
  const bool keeps_whole_model_unit =
      settings.fsdp_wrap == FsdpWrap::kModel && max_stage >= 3 && settings.world_size() > 1;
  const int min_stage = settings.float8_all_gather || keeps_whole_model_unit ? 3 : 0;
  for (int stage = min_stage; stage <= max_stage; ++stage) {
    // FSDP offloads to the CPU only. FSDP1's CPUOffload accumulates gradients only
    // under no_sync (run_settings.cc): otherwise only without accumulation.
    const bool fsdp = stage == 3 && shards_with_fsdp(settings);
    const bool fsdp1_accumulates = fsdp && sharding_of(settings) == Sharding::kFsdp1 && per_rank > micro_batch &&
                                   !resolve_stack(settings).bottom.fsdp_no_sync;
    std::vector<Offload> optimizer_offloads = {Offload::kNone};
    // DeepSpeed's ZeRO-Offload needs a ZeRO stage; torchao's CPUOffloadOptimizer
    // runs on one GPU without one.
    const bool torchao_offload = settings.cpu_offload != CpuOffloadImpl::kZeroOffload;
    const bool offload_here = torchao_offload ? stage == 0 && settings.world_size() == 1 : stage >= 1;
    // A paged optimizer (bitsandbytes' PagedAdamW) keeps its states in CUDA
    // unified memory and steps on the GPU; ZeRO-Offload and torchao replace the
    // optimizer with their own CPU one, so the two never combine (and
    // validate_settings refuses the plan: issue 37).
    const bool optimizer_may_move = !in_backward && !settings.paged_optimizer;
    if (offload_here && settings.allow_cpu_offload && optimizer_may_move && !fsdp1_accumulates) {
      optimizer_offloads.push_back(Offload::kCpu);
    }
    if (stage == 3 && settings.allow_nvme_offload && !fsdp && optimizer_may_move) {
      optimizer_offloads.push_back(Offload::kNvme);
    }
    for (Offload optimizer : optimizer_offloads) {
      std::vector<Offload> param_offloads = {Offload::kNone};
      if (stage == 3 && settings.allow_cpu_offload && !fsdp1_accumulates) param_offloads.push_back(Offload::kCpu);
      if (stage == 3 && settings.allow_nvme_offload && !fsdp) param_offloads.push_back(Offload::kNvme);
      for (Offload param : param_offloads) {
        // On one GPU, ZeRO only matters for what it offloads; without offload it
        // would add buckets and change nothing else.
        if (settings.world_size() == 1 && stage > 0 && optimizer == Offload::kNone && param == Offload::kNone) continue;
        // FSDP offloads parameters and optimizer together (FSDP2's CPUOffloadPolicy,
        // FSDP1's CPUOffload) or neither.
        if (fsdp && (optimizer == Offload::kCpu) != (param == Offload::kCpu)) {
          continue;
        }
        GlobalConfig config;
        config.zero_stage = stage;
        config.offload_optimizer = optimizer;
        config.offload_param = param;
        config.micro_batch = micro_batch;
        config.grad_accum = std::max<int64_t>(1, per_rank / micro_batch);
        out.push_back(config);
      }
    }
  }
  return out;
}

struct Candidate {
  bool found = false;
  Plan plan;
  double sample_ms = 0;
  // The fastest plan that fits the GPU but not host RAM or disk: when nothing
  // fits, it says which budget is short (issue 14: a GPU peak of 18 GiB was
  // reported as "no plan fits even with 64x the GPU memory" when host RAM was).
  bool gpu_only = false;
  Plan gpu_only_plan;
  double gpu_only_ms = 0;
};

double sample_ms_of(const Prediction& prediction, const GlobalConfig& config, int world) {
  const double samples = static_cast<double>(config.grad_accum * config.micro_batch * world);
  return prediction.time.step_ms / samples;
}

Plan make_plan(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
               const std::vector<BlockChoice>& choices, bool simulate_allocator) {
  Plan plan;
  plan.model = context.graph.name;
  plan.gpu = context.gpu.id;
  plan.settings = settings_for_plan(settings);
  plan.settings.zero_stage = config.zero_stage;
  // FSDP1's wrapping means nothing below stage 3, where the plan does not shard with it.
  if (config.zero_stage < 3) plan.settings.fsdp_wrap = FsdpWrap::kLayers;
  plan.settings.offload_optimizer = config.offload_optimizer;
  plan.settings.offload_param = config.offload_param;
  plan.settings.micro_batch = config.micro_batch;
  plan.settings.grad_accum = config.grad_accum;
  plan.settings.global_batch = 0;
  plan.settings.checkpointing = CheckpointPolicy::kList;
  plan.settings.checkpoint_blocks.clear();
  for (size_t b = 0; b < choices.size(); ++b) {
    if (choices[b] == BlockChoice::kCheckpoint) plan.settings.checkpoint_blocks.push_back(context.graph.blocks[b].name);
  }
  if (plan.settings.checkpoint_blocks.empty()) plan.settings.checkpointing = CheckpointPolicy::kNone;
  plan.config = config;
  plan.blocks = choices;
  for (const graph::Block& block : context.graph.blocks) plan.block_names.push_back(block.name);
  plan.seq_len = context.seq_len;
  plan.prediction = predict(context, settings, config, choices, simulate_allocator);
  return plan;
}

// The fastest plan over all global candidates at one micro-batch (or all), for an
// allocator budget. Host RAM and disk are checked on the full prediction.
struct SearchOptions {
  int64_t budget = 0;       // allocator bytes for the block solver
  std::vector<int64_t> micro_batches;
  int64_t gpu_budget = 0;   // what the whole prediction (context included) must stay within
  bool simulate_allocator = true;  // frontier sweeps use the block walk alone
};

SearchOptions search_options(const ModelContext& context, const RunSettings& settings,
                             std::vector<int64_t> micro_batches) {
  SearchOptions options;
  options.budget = allocator_budget(context, settings);
  options.gpu_budget = gpu_budget_bytes(context, settings);
  // A micro-batch whose sizes leave int64 is never predicted (it could only wrap).
  std::erase_if(micro_batches, [&](int64_t mb) { return !sizes_in_range(context, mb, context.seq_len); });
  options.micro_batches = std::move(micro_batches);
  return options;
}

// The same search with `factor` times the room, to see what more memory buys.
SearchOptions widened(const SearchOptions& options, double factor) {
  SearchOptions wider = options;
  wider.budget = static_cast<int64_t>(static_cast<double>(options.budget) * factor);
  wider.gpu_budget = options.gpu_budget + (wider.budget - options.budget);
  return wider;
}

Candidate search(const ModelContext& context, const RunSettings& settings, const SearchOptions& options,
                 std::vector<FrontierPoint>* points, int* evaluated, const Progress& progress) {
  Candidate best;
  int done = 0;
  int total = 0;
  for (int64_t mb : options.micro_batches) total += static_cast<int>(global_candidates(settings, mb).size());
  for (int64_t mb : options.micro_batches) {
    const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, mb,
                                             context.seq_len, Accounting::kReserved, context.gpu,
                                             context.time_options, context.checkpoint_saves,
                                                     grad_bytes_per_element(settings.precision));
    for (const GlobalConfig& config : global_candidates(settings, mb)) {
      if (progress) progress(++done, total);
      if (evaluated) ++*evaluated;
      // Solve with the block walk; if the allocator simulation finds fragmentation
      // that breaks the budget, solve again with that much less room.
      BlockSolution solution;
      Plan plan;
      bool rejected_offload = false;  // the walk fitted a plan with offloaded blocks; the simulation did not
      auto solve = [&](const RunSettings& run) {
        const BuiltStep step = build_step(context, run, config, profile, Accounting::kReserved);
        int64_t budget = options.budget;
        for (int attempt = 0; attempt < 4; ++attempt) {
          solution = solve_blocks(step.model, budget);
          if (!solution.feasible) return;
          plan = make_plan(context, settings, config, solution.choices, options.simulate_allocator);
          const int64_t excess = plan.prediction.gpu_total - options.gpu_budget;
          if (excess <= 0 && !plan.prediction.simulated_out_of_memory) return;
          budget -= std::max(excess, (budget - step.model.base) / 20) + (16LL << 20);
          rejected_offload |= std::count(solution.choices.begin(), solution.choices.end(), BlockChoice::kOffload) > 0;
          solution.feasible = false;
        }
      };
      solve(settings);
      // Offloaded activations leave the GPU only as fast as PCIe drains them, and
      // the simulation can find the copies piling up beyond what the block walk
      // counts. Less room does not cure that, more offload makes it worse: solve
      // once more with checkpointing alone before giving this configuration up.
      if (!solution.feasible && rejected_offload && settings.allow_activation_offload) {
        RunSettings no_offload = settings;
        no_offload.allow_activation_offload = false;
        solve(no_offload);
      }
      if (!solution.feasible) continue;
      const double ms = sample_ms_of(plan.prediction, config, settings.world_size());
      if (!plan.prediction.fits_host || !plan.prediction.fits_disk) {
        if (!best.gpu_only || ms < best.gpu_only_ms * (1 - 1e-3)) {
          best.gpu_only = true;
          best.gpu_only_plan = plan;
          best.gpu_only_ms = ms;
        }
        continue;
      }
      if (points) {
        FrontierPoint point;
        point.gpu_total = plan.prediction.gpu_total;
        point.sample_ms = ms;
        point.config = config;
        for (BlockChoice choice : solution.choices) {
          point.checkpointed += choice == BlockChoice::kCheckpoint;
          point.offloaded += choice == BlockChoice::kOffload;
        }
        points->push_back(point);
      }
      // Candidates come simplest first; a more complex one must be faster by more
      // than the model's resolution (0.1%) to win.
      if (!best.found || ms < best.sample_ms * (1 - 1e-3)) {
        best.found = true;
        best.plan = std::move(plan);
        best.sample_ms = ms;
      }
    }
  }
  return best;
}

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

// Whether any global configuration fits micro-batch `mb` at sequence length `seq`.
bool fits_at(const ModelContext& base, const RunSettings& settings, int64_t mb, int64_t seq) {
  if (!sizes_in_range(base, mb, seq)) return false;
  ModelContext context = base;
  context.seq_len = seq;
  RunSettings probe = settings;
  probe.global_batch = 0;
  probe.micro_batch = mb;
  probe.grad_accum = 1;
  probe.allow_micro_batch_change = false;
  SearchOptions options = search_options(context, probe, {mb});
  return search(context, probe, options, nullptr, nullptr, {}).found;
}

int64_t largest(int64_t limit, const std::function<bool(int64_t)>& fits) {
  if (!fits(1)) return 0;
  int64_t good = 1;
  int64_t step = 2;
  while (step <= limit && fits(step)) {
    good = step;
    step *= 2;
  }
  int64_t bad = std::min(step, limit + 1);
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good;
}

std::vector<Suggestion> suggestions_for(const ModelContext& context, const RunSettings& settings);
std::vector<Suggestion> budget_suggestions(const RunSettings& settings, const Plan& gpu_only);

}  // namespace

// Batches of varied length (RunSettings::shortest_sample) cost the simulator 256
// micro-batches per prediction: the search prices candidates with every batch at
// seq_len, and the plan it finds is replayed with varied batches; where those run
// out of memory, the search runs again with less room (at most 3 times).
Candidate search_for_varied_lengths(const ModelContext& context, const RunSettings& settings,
                                    const RunSettings& searched, SearchOptions options,
                                    std::vector<FrontierPoint>* points, int* evaluated, const Progress& progress) {
  Candidate best = search(context, searched, options, points, evaluated, progress);
  if (!settings.shortest_sample) return best;
  const auto replay = [&](Plan& plan) {
    plan.settings.shortest_sample = settings.shortest_sample;
    plan.prediction = with_band(context, plan.settings, plan.config, plan.blocks,
                                predict(context, plan.settings, plan.config, plan.blocks));
    return !plan.prediction.simulated_out_of_memory;
  };
  for (int attempt = 0; attempt < 3 && best.found; ++attempt) {
    if (replay(best.plan)) return best;
    options.budget -= options.budget / 10;
    best = search(context, searched, options, nullptr, evaluated, {});
  }
  if (best.found) best.found = replay(best.plan);
  return best;
}

PlanResult find_plan(const ModelContext& context, const RunSettings& given, const Progress& progress) {
  PlanResult result;
  std::vector<FrontierPoint> points;
  RunSettings settings = given;
  settings.shortest_sample.reset();
  SearchOptions options = search_options(context, settings, micro_batch_candidates(settings));
  Candidate best =
      search_for_varied_lengths(context, given, settings, options, &points, &result.configs_evaluated, progress);
  // The frontier below the budget (what saving memory costs) and beyond it (what
  // more memory would buy), from the block walk alone.
  for (double factor : {0.4, 0.55, 0.7, 0.85, 1.0, 1.25, 1.5, 2.0, 4.0}) {
    SearchOptions wider = widened(options, factor);
    wider.simulate_allocator = false;
    search(context, settings, wider, &points, &result.configs_evaluated, {});
  }
  result.frontier = pareto(std::move(points));
  result.found = best.found;
  if (best.found) {
    result.best = std::move(best.plan);
  } else if (best.gpu_only) {
    // The GPU is not what is short: no wider GPU search, and suggestions for
    // the budget that is.
    result.best = std::move(best.gpu_only_plan);
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
      Candidate near = search(context, settings, wider, nullptr, nullptr, {});
      if (near.found || near.gpu_only) {
        result.best = std::move(near.found ? near.plan : near.gpu_only_plan);
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
      largest(kMaxMicroBatch, [&](int64_t mb) { return fits_at(context, settings, mb, context.seq_len); });
  result.max_seq_len = largest(context.graph.sequence.max_seq,
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
  return search(context.value(), changed, options, nullptr, nullptr, {});
}

// When a plan fits the GPU but not host RAM or disk: the budget that would
// hold it, and the changes that make it need less of what is short.
std::vector<Suggestion> budget_suggestions(const RunSettings& settings, const Plan& gpu_only) {
  std::vector<Suggestion> out;
  const Prediction& p = gpu_only.prediction;
  const RunSettings defaults;
  auto try_change = [&](const std::string& change, const RunSettings& changed) {
    const Candidate found = try_settings(changed);
    if (found.found) out.push_back(suggestion_from(change, found, changed));
  };
  if (!p.fits_host) {
    Suggestion given;
    given.change = "--host-ram " + std::to_string((p.host_ram + (int64_t{1} << 30) - 1) >> 30) + "GiB";
    given.detail = "the plan's host RAM need per node" +
                   std::string(settings.host_ram_bytes == defaults.host_ram_bytes
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
                   std::string(settings.disk_free_bytes == defaults.disk_free_bytes
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
  // More GPUs of the same kind, with ZeRO-3 allowed.
  for (int gpus : {2, 4, 8, 16, 32, 64}) {
    if (gpus <= settings.world_size()) continue;
    RunSettings changed = settings;
    changed.gpus_per_node = std::min(gpus, 8);
    changed.nodes = gpus / changed.gpus_per_node;
    changed.max_zero_stage = 3;
    changed.global_batch = 0;
    const Candidate found = try_settings(changed);
    if (found.found) {
      out.push_back(suggestion_from(std::to_string(gpus) + " x " + context.gpu.name, found, changed));
      break;
    }
  }
  // A larger GPU, the smallest one that is enough.
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
    if (found.found) {
      out.push_back(suggestion_from("one " + gpu.name, found, changed));
      break;
    }
  }
  // Fewer trainable parameters.
  if (settings.mode == TrainMode::kFull) {
    for (TrainMode mode : {TrainMode::kLora, TrainMode::kQlora}) {
      RunSettings changed = settings;
      changed.mode = mode;
      const Candidate found = try_settings(changed);
      if (found.found) {
        out.push_back(suggestion_from(std::string(mode_name(mode)) + " (rank " + std::to_string(changed.lora.rank) + ")", found, changed));
        break;
      }
    }
  } else if (settings.mode == TrainMode::kLora) {
    RunSettings changed = settings;
    changed.mode = TrainMode::kQlora;
    const Candidate found = try_settings(changed);
    if (found.found) out.push_back(suggestion_from("qlora (4-bit NF4 base)", found, changed));
  }
  // Offload the user had ruled out.
  if (!settings.allow_cpu_offload || !settings.allow_activation_offload || settings.max_zero_stage < 3) {
    RunSettings changed = settings;
    changed.allow_cpu_offload = true;
    changed.allow_activation_offload = true;
    changed.max_zero_stage = 3;
    const Candidate found = try_settings(changed);
    if (found.found) out.push_back(suggestion_from("allow ZeRO-3 and CPU offload", found, changed));
  }
  // A shorter sequence.
  const int64_t seq = largest(context.seq_len, [&](int64_t s) { return fits_at(context, settings, 1, s); });
  if (seq > 0 && seq < context.seq_len) {
    Suggestion s;
    s.change = "sequence length " + std::to_string(seq) + " (from " + std::to_string(context.seq_len) + ")";
    s.detail = "the longest sequence that fits at micro-batch 1 with the allowed options";
    out.push_back(s);
  }
  return out;
}

}  // namespace

}  // namespace headroom::planner
