// The plan search of a transformers 4.x MoE run that does not fit (issue 38):
// Qwen3-30B-A3B's layout (128 experts per layer, each its own nn.Linear modules)
// cut to LAYERS layers (tests/data/hf/qwen3-moe-2l, or a config.json given), LoRA,
// on a GPU too small for it, so `fit` searches. Prints the whole `fit` (the run as
// given, the search, the largest micro-batch and sequence), and, in the same run,
// the largest-micro-batch sweep two ways: fits_at (each probe stops at its first
// configuration that fits, contexts shared across offloads) against the baseline
// of a whole search per probe (search_candidates(...).found); both must agree.
// Usage: moe_search_bench [config.json] [gpu_mem_gib]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/predict/planner.h"
#include "planner/search/candidate_search.h"
#include "planner/search/plan_contexts.h"
#include "planner/settings/settings_json.h"

using namespace headroom;
using namespace headroom::planner;

namespace {

template <typename F>
double seconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The probe fits_at searches at `mb` (candidate_search.cc), searched whole.
bool whole_search_fits(const ModelContext& base, const RunSettings& settings, int64_t mb) {
  const RunSettings probe = fits_at_probe(base, settings, mb, base.seq_len);
  PlanContexts contexts;
  return search_candidates(contexts, probe, search_options(base, probe, {mb}), nullptr, nullptr, {}).found;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string config = argc > 1 ? argv[1] : std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen3-moe-2l/config.json";
  const double gpu_gib = argc > 2 ? std::atof(argv[2]) : 9.0;
  const nlohmann::json fields = {{"model", config},       {"gpu", "h100-sxm"}, {"gpu_memory_bytes", static_cast<int64_t>(gpu_gib * (1LL << 30))},
                                 {"mode", "lora"},        {"seq_len", 2048},   {"versions", {{"transformers", "4.51.3"}}}};
  Result<RunSettings> settings = settings_from_json(fields, "bench");
  if (!settings.is_ok()) {
    std::fprintf(stderr, "%s\n", settings.message().c_str());
    return 1;
  }
  std::optional<Result<FitAnswer>> fitted;
  const double fit_s = seconds([&] { fitted.emplace(fit(settings.value())); });
  const Result<FitAnswer>& answer = *fitted;
  if (!answer.is_ok()) {
    std::fprintf(stderr, "%s\n", answer.message().c_str());
    return 1;
  }
  std::printf("MoE plan search: %s, LoRA, transformers 4.51.3, %.1f GiB GPU\n", config.c_str(), gpu_gib);
  std::printf("fit (run as given + search): %.2f s, %d configurations, fits as given: %s\n", fit_s,
              answer->alternative.configs_evaluated, answer->fits ? "yes" : "no");
  const Result<ModelContext> base = prepare_context(settings.value());
  if (!base.is_ok()) return 1;
  int64_t largest_probe = 0;
  int64_t largest_whole = 0;
  const double probe_s = seconds([&] {
    largest_probe = largest_fitting(64, [&](int64_t mb) { return fits_at(base.value(), settings.value(), mb, base->seq_len); });
  });
  const double whole_s = seconds([&] {
    largest_whole = largest_fitting(64, [&](int64_t mb) { return whole_search_fits(base.value(), settings.value(), mb); });
  });
  std::printf("largest micro-batch sweep: fits_at %.2f s, whole search per probe %.2f s (baseline), ratio %.2fx\n",
              probe_s, whole_s, whole_s / probe_s);
  std::printf("largest micro-batch: %lld (baseline %lld)%s\n", static_cast<long long>(largest_probe),
              static_cast<long long>(largest_whole), largest_probe == largest_whole ? "" : "  DISAGREE");
  return largest_probe == largest_whole ? 0 : 1;
}
