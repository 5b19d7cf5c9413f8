// Unpacked data padded per batch (RunSettings::shortest_sample): batches of varied
// length grow the caching allocator's cache beyond what batches at seq_len
// reserve; the prediction's band runs from one to the other.
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "planner/predict/planner.h"
#include "planner/predict/prediction.h"
#include "planner/settings/run_settings.h"
#include "planner/predict/simulator.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

// GPT-2 fully fine-tuned under AMP-free pure bf16, B = 2, S = 1024, as the Trainer runs it.
RunSettings gpt2(int64_t grad_accum) {
  RunSettings s;
  s.model = "gpt2";
  s.gpu = "a100-80g";
  s.precision = Precision::kBf16Pure;
  s.micro_batch = 2;
  s.seq_len = 1024;
  s.grad_accum = grad_accum;
  s.stack = Stack::kHfTrainer;
  return s;
}

struct Run {
  Simulation simulation;
  Prediction prediction;
};

Run run(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  const GlobalConfig config = user_config(settings);
  SimulatorOptions quiet;
  quiet.record_events = false;
  return {simulate(context.value(), settings, config, choices.value(), quiet),
          predict(context.value(), settings, config, choices.value())};
}

RunSettings varied(RunSettings s, int64_t shortest) {
  s.shortest_sample = shortest;
  return s;
}

}  // namespace

TEST_CASE("batches of varied length grow the allocator's cache beyond batches at seq_len") {
  const Run fixed = run(gpt2(1));
  const Run padded = run(varied(gpt2(1), 16));
  const Simulation& s = padded.simulation;
  MESSAGE("reserved at seq_len " << fixed.simulation.peak_reserved / double(1 << 20) << " MiB, over "
                                 << s.varied_length_micro_steps << " varied batches "
                                 << s.varied_peak_reserved / double(1 << 20) << " MiB");
  CHECK(fixed.simulation.varied_length_micro_steps == 0);
  CHECK(fixed.simulation.varied_peak_reserved == 0);
  CHECK(s.varied_length_micro_steps == 256);
  // The step at seq_len is the same run either way: timeline, peaks and time.
  CHECK(s.peak_reserved == fixed.simulation.peak_reserved);
  CHECK(s.peak_allocated == fixed.simulation.peak_allocated);
  CHECK(s.time.step_ms == doctest::Approx(fixed.simulation.time.step_ms));
  // Short batches first leave segments too small for the long ones.
  CHECK(s.varied_peak_reserved > fixed.simulation.peak_reserved);
  // No batch is longer than seq_len, so none allocates more at once, but for the
  // remainders under 1 MiB a large block keeps when it is not split (allocated counts them).
  CHECK(s.varied_peak_allocated <= fixed.simulation.peak_allocated + fixed.simulation.peak_allocated / 100);
  // The same lengths every time (a fixed generator).
  const Run again = run(varied(gpt2(1), 16));
  CHECK(again.simulation.varied_peak_reserved == s.varied_peak_reserved);
}

TEST_CASE("the band runs from batches at seq_len to the cache varied batches grow") {
  const Run fixed = run(gpt2(4));
  const Run padded = run(varied(gpt2(4), 16));
  const Prediction& p = padded.prediction;
  CHECK(padded.simulation.varied_length_micro_steps == 256);  // 64 optimizer steps of 4
  CHECK(p.varied_length_micro_steps == 256);
  CHECK(p.gpu_total_bottom == fixed.prediction.gpu_total);
  CHECK(p.gpu_total - p.gpu_total_bottom ==
        padded.simulation.varied_peak_reserved - fixed.prediction.peak_reserved);
  CHECK(p.peak_reserved == padded.simulation.varied_peak_reserved);
  REQUIRE(p.band_unknowns.size() == 1);
  CHECK(p.band_unknowns[0].find("padded batches") != std::string::npos);
  CHECK(fixed.prediction.band_unknowns.empty());
}

TEST_CASE("every sample at seq_len replays nothing more") {
  const Run at_cap = run(varied(gpt2(1), 1024));
  CHECK(at_cap.simulation.varied_length_micro_steps == 0);
  CHECK(at_cap.prediction.gpu_total == run(gpt2(1)).prediction.gpu_total);
}

TEST_CASE("expandable segments grow one segment instead of caching blocks of every size") {
  RunSettings s = varied(gpt2(1), 16);
  const Run cached = run(s);
  s.expandable_segments = true;
  const Run expandable = run(s);
  CHECK(expandable.simulation.varied_peak_reserved < cached.simulation.varied_peak_reserved);
}

TEST_CASE("at the budget the allocator releases its cache and retries: no out-of-memory while the batches fit") {
  // A budget above what batches at seq_len reserve but below what the varied ones
  // would cache without limit.
  const Run unlimited = run(varied(gpt2(1), 16));
  const Run fixed = run(gpt2(1));
  const int64_t context_and_margin = fixed.prediction.gpu_total - fixed.simulation.peak_reserved;
  RunSettings s = varied(gpt2(1), 16);
  s.safety_margin = 0;
  const int64_t between = (fixed.simulation.peak_reserved + unlimited.simulation.varied_peak_reserved) / 2;
  s.gpu_memory_bytes = between + context_and_margin;
  const Run limited = run(s);
  CHECK_FALSE(limited.simulation.out_of_memory);
  CHECK(limited.simulation.varied_peak_reserved < unlimited.simulation.varied_peak_reserved);
  CHECK(limited.prediction.fits_gpu);
}

TEST_CASE("shortest_sample is checked against the sequence and the data layout") {
  RunSettings s = varied(gpt2(1), 2048);
  Status status = validate_settings(s, "settings.json");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("shortest_sample") != std::string::npos);
  CHECK(status.message().find("1024") != std::string::npos);

  s = varied(gpt2(1), 0);
  CHECK_FALSE(validate_settings(s, "settings.json").is_ok());

  s = varied(gpt2(1), 16);
  s.attention = models::AttentionImpl::kFlex;
  s.document_tokens = 256;
  status = validate_settings(s, "settings.json");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("document_tokens") != std::string::npos);

  // The model's default sequence is known only once the model is loaded.
  s = varied(gpt2(1), 4096);
  s.seq_len = 0;
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_FALSE(context.is_ok());
  CHECK(context.message().find("shortest_sample") != std::string::npos);

  RunSettings vit;
  vit.model = "vit-b-16";
  vit.gpu = "a100-80g";
  vit.shortest_sample = 16;
  context = prepare_context(vit);
  REQUIRE_FALSE(context.is_ok());
  CHECK(context.message().find("token model") != std::string::npos);
}

TEST_CASE("shortest_sample round-trips through the settings JSON") {
  const RunSettings s = varied(gpt2(1), 64);
  const nlohmann::json j = settings_to_json(s);
  CHECK(j.at("shortest_sample") == 64);
  Result<RunSettings> back = settings_from_json(j, "settings.json");
  REQUIRE(back.is_ok());
  CHECK(back->shortest_sample == 64);
  CHECK_FALSE(settings_to_json(gpt2(1)).contains("shortest_sample"));
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("plan searches with batches at seq_len and replays the plan it finds with varied batches") {
  RunSettings s;
  s.model = "gpt2";
  s.gpu = "4090";
  s.micro_batch = 4;
  s.seq_len = 1024;
  s.shortest_sample = 16;
  Result<PlanResult> result = plan(s);
  REQUIRE_MESSAGE(result.is_ok(), result.message());
  REQUIRE(result->found);
  const Plan& best = result->best;
  CHECK(best.settings.shortest_sample == 16);  // the plan file replays them too
  CHECK(best.prediction.varied_length_micro_steps == 256);
  CHECK_FALSE(best.prediction.simulated_out_of_memory);
  CHECK(best.prediction.gpu_total >= best.prediction.gpu_total_bottom);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("group_by_length hands out the longest sample first and length-sorted batches: the cache barely grows") {
  RunSettings s = varied(gpt2(1), 16);
  Result<ModelContext> context = prepare_context(s);
  REQUIRE(context.is_ok());
  const auto choices = user_block_choices(context.value(), s);
  REQUIRE(choices.is_ok());
  const Simulation shuffled = simulate(context.value(), s, user_config(s), choices.value());
  s.group_by_length = true;
  const Simulation grouped = simulate(context.value(), s, user_config(s), choices.value());
  MESSAGE("at seq_len " << grouped.peak_reserved / double(1 << 20) << " MiB; shuffled "
                        << shuffled.varied_peak_reserved / double(1 << 20) << " MiB; grouped by length "
                        << grouped.varied_peak_reserved / double(1 << 20) << " MiB");
  CHECK(grouped.varied_peak_reserved < shuffled.varied_peak_reserved);
  // A first batch at seq_len reserves what the shorter ones after it are cut from.
  CHECK(grouped.varied_peak_reserved <= grouped.peak_reserved + grouped.peak_reserved / 20);
  CHECK(settings_from_json(settings_to_json(s), "s.json")->group_by_length);
}

}  // namespace headroom::planner
