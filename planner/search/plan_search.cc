// find_plan: the search over global configurations (candidate_search.h) at the
// run's budget and around it, from which come the plan, the frontier, the largest
// micro-batch and sequence length, and what would make an infeasible run fit.
#include <algorithm>
#include <optional>

#include "planner/predict/planner.h"
#include "planner/search/candidate_search.h"
#include "planner/search/suggestions.h"
#include "planner/settings/may_change.h"

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
    plan.prediction = predict_in(*priced, plan.settings, plan.config, plan.blocks);
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
  if (reprice) plan.prediction = predict_in(*priced, plan.settings, plan.config, plan.blocks);
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
  result.space = knobs_in_words(options.knobs);
  result.space_is_stack = settings.may_change.empty();
  if (best.found) {
    result.best = std::move(best.plan);
    finish_prediction(contexts, result.best, false);
    result.alternatives = beyond_the_space(settings, best.sample_ms);
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

}  // namespace headroom::planner
