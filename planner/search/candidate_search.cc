#include "planner/search/candidate_search.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "planner/search/block_solver.h"
#include "planner/search/plan_contexts.h"
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

struct StageRange {
  int min = 0;
  int max = 0;
};

// The ZeRO stages the run may use.
StageRange zero_stages(const RunSettings& settings) {
  // QLoRA's 4-bit weights are not partitioned by ZeRO-3 in the bitsandbytes +
  // DeepSpeed stack our users run (the LLaVA QLoRA story hit "tensors not on the
  // same GPU" with ZeRO-3 and moved to ZeRO-2), so the planner stops at stage 2.
  int max_stage = settings.mode == TrainMode::kQlora ? std::min(settings.max_zero_stage, 2) : settings.max_zero_stage;
  // In-backward steps each gradient where it is produced: no ZeRO partitioning, no offload.
  if (settings.optimizer_impl == OptimizerImpl::kInBackward) max_stage = 0;
  // fp8 all-gather is FSDP2's at stage 3: the graph was built for it.
  // A whole-model FSDP1 unit is how the run's config shards (MMEngine's
  // MMFullyShardedDataParallel, Accelerate's NO_WRAP): the plan keeps that
  // wrapper and chooses its CPU offload.
  const bool keeps_whole_model_unit =
      settings.fsdp_wrap == FsdpWrap::kModel && max_stage >= 3 && settings.world_size() > 1;
  const int min_stage = settings.float8_all_gather || keeps_whole_model_unit ? 3 : 0;
  return {min_stage, max_stage};
}

// What decides the offloads open at one ZeRO stage.
struct StageFacts {
  int stage = 0;
  bool fsdp = false;               // the parameters sharded with FSDP (stage 3, or 2 without resharding)
  bool fsdp1_accumulates = false;  // FSDP1 accumulating outside no_sync: no CPU offload
};

StageFacts stage_facts(const RunSettings& settings, int stage, int64_t per_rank, int64_t micro_batch) {
  StageFacts facts;
  facts.stage = stage;
  // FSDP offloads to the CPU only. FSDP1's CPUOffload accumulates gradients only
  // under no_sync (run_settings.cc): otherwise only without accumulation.
  facts.fsdp = fsdp_shards_params(settings, stage);
  facts.fsdp1_accumulates = facts.fsdp && sharding_of(settings) == Sharding::kFsdp1 && per_rank > micro_batch &&
                            !resolve_stack(settings).bottom.fsdp_no_sync;
  return facts;
}

std::vector<Offload> optimizer_offloads(const RunSettings& settings, const StageFacts& at) {
  std::vector<Offload> out = {Offload::kNone};
  const bool in_backward = settings.optimizer_impl == OptimizerImpl::kInBackward;
  // DeepSpeed's ZeRO-Offload needs a ZeRO stage; torchao's CPUOffloadOptimizer
  // runs on one GPU without one.
  const bool torchao_offload = settings.cpu_offload != CpuOffloadImpl::kZeroOffload;
  const bool offload_here = torchao_offload ? at.stage == 0 && settings.world_size() == 1 : at.stage >= 1;
  // A paged optimizer (bitsandbytes' PagedAdamW) keeps its states in CUDA
  // unified memory and steps on the GPU; ZeRO-Offload and torchao replace the
  // optimizer with their own CPU one, so the two never combine (and
  // validate_settings refuses the plan: issue 37).
  const bool optimizer_may_move = !in_backward && !settings.paged_optimizer;
  if (offload_here && settings.allow_cpu_offload && optimizer_may_move && !at.fsdp1_accumulates) {
    out.push_back(Offload::kCpu);
  }
  if (at.stage == 3 && settings.allow_nvme_offload && !at.fsdp && optimizer_may_move) out.push_back(Offload::kNvme);
  return out;
}

std::vector<Offload> param_offloads(const RunSettings& settings, const StageFacts& at) {
  std::vector<Offload> out = {Offload::kNone};
  if (at.stage == 3 && settings.allow_cpu_offload && !at.fsdp1_accumulates) out.push_back(Offload::kCpu);
  if (at.stage == 3 && settings.allow_nvme_offload && !at.fsdp) out.push_back(Offload::kNvme);
  return out;
}

// Whether a stage and its offloads are the run's own.
bool as_given(const RunSettings& settings, int stage, Offload optimizer, Offload param) {
  return stage == settings.zero_stage && optimizer == settings.offload_optimizer && param == settings.offload_param;
}

// Whether a pair of offloads at this stage is a configuration of its own.
bool worth_trying(const RunSettings& settings, const StageFacts& at, Offload optimizer, Offload param) {
  // The run as given is always one.
  if (as_given(settings, at.stage, optimizer, param)) return true;
  // On one GPU, ZeRO only matters for what it offloads; without offload it
  // would add buckets and change nothing else.
  if (settings.world_size() == 1 && at.stage > 0 && optimizer == Offload::kNone && param == Offload::kNone) {
    return false;
  }
  // FSDP offloads parameters and optimizer together (FSDP2's CPUOffloadPolicy,
  // FSDP1's CPUOffload) or neither.
  return !(at.fsdp && (optimizer == Offload::kCpu) != (param == Offload::kCpu));
}

// Whether changing one offload from `given` to `to` is in the plan's space: NVMe
// on either side needs the nvme knob, any other change the offload knob.
bool offload_change_allowed(KnobSet knobs, Offload given, Offload to) {
  if (given == to) return true;
  if (given == Offload::kNvme || to == Offload::kNvme) return knobs.has(Knob::kNvme);
  return knobs.has(Knob::kOffload);
}

// Whether `config` changes only what the plan's space may change (may_change.h).
bool within_knobs(const RunSettings& settings, KnobSet knobs, const GlobalConfig& config) {
  if (!knobs.has(Knob::kZero) && config.zero_stage != settings.zero_stage) return false;
  return offload_change_allowed(knobs, settings.offload_optimizer, config.offload_optimizer) &&
         offload_change_allowed(knobs, settings.offload_param, config.offload_param);
}

// ZeRO stage and offload combinations DeepSpeed accepts, within what the user
// allows and the plan's space may change; the run's own always among them.
std::vector<GlobalConfig> global_candidates(const RunSettings& settings, KnobSet knobs, int64_t micro_batch) {
  std::vector<GlobalConfig> out;
  const int64_t per_rank = settings.effective_global_batch() / settings.world_size();
  const auto config_of = [&](int stage, Offload optimizer, Offload param) {
    GlobalConfig config;
    config.zero_stage = stage;
    config.offload_optimizer = optimizer;
    config.offload_param = param;
    config.micro_batch = micro_batch;
    config.grad_accum = std::max<int64_t>(1, per_rank / micro_batch);
    return config;
  };
  const StageRange stages = zero_stages(settings);
  bool has_given = false;
  for (int stage = stages.min; stage <= stages.max; ++stage) {
    const StageFacts at = stage_facts(settings, stage, per_rank, micro_batch);
    for (Offload optimizer : optimizer_offloads(settings, at)) {
      for (Offload param : param_offloads(settings, at)) {
        const GlobalConfig config = config_of(stage, optimizer, param);
        if (!worth_trying(settings, at, optimizer, param) || !within_knobs(settings, knobs, config)) continue;
        has_given |= as_given(settings, stage, optimizer, param);
        out.push_back(config);
      }
    }
  }
  if (!has_given && (!knobs.has(Knob::kZero) || !knobs.has(Knob::kOffload))) {
    out.push_back(config_of(settings.zero_stage, settings.offload_optimizer, settings.offload_param));
  }
  return out;
}

double sample_ms_of(const Prediction& prediction, const GlobalConfig& config, int world) {
  const double samples = static_cast<double>(config.grad_accum * config.micro_batch * world);
  return prediction.time.step_ms / samples;
}

// The plan of `config` with `choices`, priced in its own settings' context as
// prepare_plan (plan_file.h) prices a plan file: the search's answer is the
// run `simulate`, `fit` and `run` see.
Plan make_plan(const PricedContext& priced, const RunSettings& plan_settings, const GlobalConfig& config,
               const std::vector<BlockChoice>& choices, bool simulate_allocator) {
  const ModelContext& context = priced.context;
  Plan plan;
  plan.model = context.graph.name;
  plan.gpu = context.gpu.id;
  plan.settings = with_block_choices(plan_settings, context.graph, choices);
  plan.config = config;
  plan.blocks = choices;
  for (const graph::Block& block : context.graph.blocks) plan.block_names.push_back(block.name);
  plan.seq_len = context.seq_len;
  plan.prediction = predict_in(priced, plan.settings, config, choices, simulate_allocator);
  return plan;
}

// The block choices a stack that checkpoints coarsely can make (may_change.h):
// every block or none; every N-th block for N = 1..blocks (torchtitan's
// selective_ac_option counts the blocks it wraps from 1); or the run's own.
// Empty for per-block checkpointing, which the exact solver decides.
std::vector<std::vector<BlockChoice>> checkpoint_patterns(const ModelContext& context, const RunSettings& searched,
                                                          CheckpointGranularity granularity) {
  std::vector<std::vector<BlockChoice>> out;
  const std::vector<graph::Block>& blocks = context.graph.blocks;
  if (granularity == CheckpointGranularity::kPerBlock) return out;
  if (granularity == CheckpointGranularity::kAsGiven) {
    Result<std::vector<BlockChoice>> given = user_block_choices(context, searched);
    if (given.is_ok()) out.push_back(given.value());
    return out;
  }
  out.emplace_back(blocks.size(), BlockChoice::kKeep);
  const int layers = static_cast<int>(std::count_if(blocks.begin(), blocks.end(),
                                                    [](const graph::Block& b) { return b.checkpointable; }));
  const int widest = granularity == CheckpointGranularity::kEveryNth ? layers : 1;
  for (int every = 1; every <= widest; ++every) {
    std::vector<BlockChoice> choices(blocks.size(), BlockChoice::kKeep);
    int count = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (blocks[b].checkpointable && ++count % every == 0) choices[b] = BlockChoice::kCheckpoint;
    }
    out.push_back(std::move(choices));
  }
  return out;
}

// One global configuration solved: its blocks' choices and the plan they make.
struct SolvedConfig {
  BlockSolution solution;
  Plan plan;
  bool rejected_offload = false;  // the walk fitted a plan with offloaded blocks; the simulation did not
};

// Solves one global configuration in its plan's own context (plan_contexts.h).
class ConfigSolver {
 public:
  // `patterns`: the only block choices the stack can make (checkpoint_patterns);
  // empty: any, solved exactly per block.
  ConfigSolver(const PricedContext& priced, const RunSettings& plan_settings, const SearchOptions& options,
               const std::vector<std::vector<BlockChoice>>& patterns)
      : priced_(priced), plan_settings_(plan_settings), options_(options), patterns_(patterns) {}

  SolvedConfig solve(const GlobalConfig& config) const {
    SolvedConfig solved;
    // Offloading a block's activations is the exact solver's choice only where the
    // plan's space has it; fixed patterns carry their own.
    RunSettings run = plan_settings_;
    if (patterns_.empty() && !options_.knobs.has(Knob::kActivationOffload)) run.allow_activation_offload = false;
    solve_within_room(run, config, solved);
    // Offloaded activations leave the GPU only as fast as PCIe drains them, and
    // the simulation can find the copies piling up beyond what the block walk
    // counts. Less room does not cure that, more offload makes it worse: solve
    // once more with checkpointing alone before giving this configuration up.
    if (!solved.solution.feasible && solved.rejected_offload && run.allow_activation_offload) {
      RunSettings no_offload = run;
      no_offload.allow_activation_offload = false;
      solve_within_room(no_offload, config, solved);
    }
    return solved;
  }

 private:
  // Solve with the block walk; if the allocator simulation finds fragmentation
  // that breaks the budget, solve again with that much less room. `run` decides
  // what the walk may choose; the plan is priced with the plan's own settings.
  void solve_within_room(const RunSettings& run, const GlobalConfig& config, SolvedConfig& solved) const {
    const BuiltStep step = build_step(priced_.context, run, config, priced_.profile, Accounting::kReserved);
    int64_t budget = options_.budget;
    for (int attempt = 0; attempt < 4; ++attempt) {
      solved.solution = patterns_.empty() ? solve_blocks(step.model, budget) : best_pattern(step.model, budget, patterns_);
      if (!solved.solution.feasible) return;
      solved.plan = make_plan(priced_, plan_settings_, config, solved.solution.choices,
                              options_.simulate_allocator);
      const int64_t excess = solved.plan.prediction.gpu_total - options_.gpu_budget;
      if (excess <= 0 && !solved.plan.prediction.simulated_out_of_memory) return;
      budget -= std::max(excess, (budget - step.model.base) / 20) + (16LL << 20);
      const std::vector<BlockChoice>& choices = solved.solution.choices;
      solved.rejected_offload |= std::count(choices.begin(), choices.end(), BlockChoice::kOffload) > 0;
      solved.solution.feasible = false;
    }
  }

  const PricedContext& priced_;
  const RunSettings& plan_settings_;
  const SearchOptions& options_;
  const std::vector<std::vector<BlockChoice>>& patterns_;
};

FrontierPoint frontier_point(const SolvedConfig& solved, const GlobalConfig& config, double ms) {
  FrontierPoint point;
  point.gpu_total = solved.plan.prediction.gpu_total;
  point.sample_ms = ms;
  point.config = config;
  for (BlockChoice choice : solved.solution.choices) {
    point.checkpointed += choice == BlockChoice::kCheckpoint;
    point.offloaded += choice == BlockChoice::kOffload;
  }
  return point;
}

int candidate_count(const RunSettings& settings, const SearchOptions& options) {
  int total = 0;
  for (int64_t mb : options.micro_batches) total += static_cast<int>(global_candidates(settings, options.knobs, mb).size());
  return total;
}

}  // namespace

std::vector<int64_t> micro_batch_candidates(const RunSettings& settings) {
  if (!knobs_for(settings).has(Knob::kMicroBatch)) return {settings.micro_batch};
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

SearchOptions search_options(const ModelContext& context, const RunSettings& settings,
                             std::vector<int64_t> micro_batches) {
  SearchOptions options;
  options.budget = allocator_budget(context, settings);
  options.knobs = knobs_for(settings);
  options.gpu_budget = gpu_budget_bytes(context, settings);
  // A micro-batch whose sizes leave int64 is never predicted (it could only wrap).
  std::erase_if(micro_batches, [&](int64_t mb) { return !sizes_in_range(context, mb, context.seq_len); });
  options.micro_batches = std::move(micro_batches);
  return options;
}

SearchOptions widened(const SearchOptions& options, double factor) {
  SearchOptions wider = options;
  wider.budget = static_cast<int64_t>(static_cast<double>(options.budget) * factor);
  wider.gpu_budget = options.gpu_budget + (wider.budget - options.budget);
  return wider;
}

namespace {

// `config` solved in its plan's own context; nullopt where no context prices it.
std::optional<SolvedConfig> solve_config(PlanContexts& contexts, const RunSettings& settings,
                                         const SearchOptions& options, const GlobalConfig& config) {
  const RunSettings plan_settings = plan_settings_for(settings, config);
  const PricedContext* priced = contexts.context_for(plan_settings);
  if (priced == nullptr) return std::nullopt;
  const std::vector<std::vector<BlockChoice>> patterns =
      checkpoint_patterns(priced->context, settings, checkpoint_granularity(options.knobs));
  return ConfigSolver(*priced, plan_settings, options, patterns).solve(config);
}

bool fits_all_budgets(const SolvedConfig& solved) {
  return solved.solution.feasible && solved.plan.prediction.fits_host && solved.plan.prediction.fits_disk;
}

// search_candidates(...).found, stopping at the first configuration that fits: each
// is solved alone, so which one is tried first changes no answer. The last of
// global_candidates (more sharding, more offload) save the most memory: tried first.
bool any_candidate_fits(PlanContexts& contexts, const RunSettings& settings, const SearchOptions& options) {
  for (int64_t mb : options.micro_batches) {
    const std::vector<GlobalConfig> configs = global_candidates(settings, options.knobs, mb);
    for (auto config = configs.rbegin(); config != configs.rend(); ++config) {
      const std::optional<SolvedConfig> solved = solve_config(contexts, settings, options, *config);
      if (solved && fits_all_budgets(*solved)) return true;
    }
  }
  return false;
}

}  // namespace

Candidate search_candidates(PlanContexts& contexts, const RunSettings& settings, const SearchOptions& options,
                            std::vector<FrontierPoint>* points, int* evaluated, const Progress& progress) {
  Candidate best;
  int done = 0;
  const int total = candidate_count(settings, options);
  for (int64_t mb : options.micro_batches) {
    for (const GlobalConfig& config : global_candidates(settings, options.knobs, mb)) {
      if (progress) progress(++done, total);
      if (evaluated) ++*evaluated;
      std::optional<SolvedConfig> solved = solve_config(contexts, settings, options, config);
      if (!solved || !solved->solution.feasible) continue;
      const double ms = sample_ms_of(solved->plan.prediction, config, settings.world_size());
      if (!fits_all_budgets(*solved)) {
        best.offer_gpu_only(solved->plan, ms);
        continue;
      }
      if (points) points->push_back(frontier_point(*solved, config, ms));
      best.offer(std::move(solved->plan), ms);
    }
  }
  return best;
}

RunSettings fits_at_probe(const ModelContext& base, const RunSettings& settings, int64_t mb, int64_t seq) {
  // The run at this length is the one `fit --seq` prices: its own contexts (a
  // document mask, compiled blocks and the sequence's checks follow the length).
  RunSettings probe = settings;
  probe.global_batch = 0;
  probe.micro_batch = mb;
  probe.grad_accum = 1;
  probe.allow_micro_batch_change = false;
  if (seq != base.seq_len) {
    probe.resolution = 0;
    probe.seq_len = seq;
  }
  return probe;
}

bool fits_at(const ModelContext& base, const RunSettings& settings, int64_t mb, int64_t seq) {
  if (!sizes_in_range(base, mb, seq)) return false;
  const RunSettings probe = fits_at_probe(base, settings, mb, seq);
  PlanContexts contexts;
  const SearchOptions options = search_options(base, probe, {mb});
  return any_candidate_fits(contexts, probe, options);
}

int64_t largest_fitting(int64_t limit, const std::function<bool(int64_t)>& fits) {
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

}  // namespace headroom::planner
