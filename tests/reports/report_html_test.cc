// The HTML report: every chart present with units and legends, names escaped,
// numbers in GiB, big plans bounded in size; the measurement format.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "reports/measured_run.h"
#include "reports/report_html.h"

namespace headroom::reports {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

planner::Plan hand_made_plan(int blocks) {
  planner::Plan plan;
  plan.model = "toy<script>alert(1)</script>";
  plan.gpu = "a6000";
  plan.seq_len = 2048;
  for (int b = 0; b < blocks; ++b) {
    plan.block_names.push_back("model.layers." + std::to_string(b));
    plan.blocks.push_back(b % 3 == 0 ? planner::BlockChoice::kCheckpoint
                          : b % 3 == 1 ? planner::BlockChoice::kKeep
                                       : planner::BlockChoice::kOffload);
  }
  planner::Prediction& p = plan.prediction;
  p.peak.cuda_context = kGiB / 2;
  p.peak.parameters = 40 * kGiB;
  p.peak.activations = 3 * kGiB;
  p.gpu_total = p.peak.total();
  p.gpu_capacity = 48 * kGiB;
  p.gpu_budget = 45 * kGiB;
  p.fits_gpu = p.fits_host = p.fits_disk = true;
  p.peak_allocated = 43 * kGiB;
  p.peak_reserved = 43 * kGiB + kGiB / 2;
  p.time.step_ms = 1000;
  return plan;
}

planner::Simulation hand_made_simulation() {
  planner::Simulation s;
  for (int i = 0; i <= 100; ++i) {
    const int64_t allocated = (40 + i % 4) * kGiB;
    s.memory.push_back({i * 10.0, allocated, allocated + kGiB / 4, "forward x"});
  }
  s.peak_allocated = 43 * kGiB;
  s.peak_reserved = 43 * kGiB + kGiB / 4;
  s.peak_time_ms = 30;
  s.peak_label = "backward <layer 3>";
  s.time.step_ms = 1000;
  for (int i = 0; i < 20; ++i) {
    s.events.push_back({planner::Stream::kCompute, i < 10 ? planner::Phase::kForward : planner::Phase::kBackward,
                        i * 50.0, i * 50.0 + 40, 0, i, "op " + std::to_string(i), 0, 1e9});
  }
  s.events.push_back({planner::Stream::kCopyOut, planner::Phase::kOffload, 100, 180, 0, 2, "offload", 1 << 20, 0});
  return s;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the report holds every chart with units, legends and block names") {
  const planner::Plan plan = hand_made_plan(12);
  const planner::Simulation simulation = hand_made_simulation();
  std::vector<planner::FrontierPoint> frontier = {{30 * kGiB, 1300, {}, 12, 0}, {44 * kGiB, 1000, {}, 4, 4}};
  MeasuredRun measured;
  measured.device = "NVIDIA RTX A6000";
  measured.steps = {{1, 42 * kGiB, 44 * kGiB, 1100, 2.0}, {2, 42 * kGiB, 44 * kGiB, 1050, 1.9}};
  ReportInput input;
  input.plan = &plan;
  input.simulation = &simulation;
  input.frontier = &frontier;
  input.measurement = &measured;
  input.gpu_name = "NVIDIA RTX A6000";
  input.generated_by = "test";
  const std::string html = render_html_report(input);
  for (const char* id : {"chart-breakdown", "chart-memory", "chart-frontier", "chart-blocks", "chart-timeline"}) {
    CHECK_MESSAGE(contains(html, std::string("<svg id=\"") + id + "\""), id);
  }
  CHECK(contains(html, "(GiB)"));
  CHECK(contains(html, "time in the step (ms)"));
  CHECK(contains(html, "time per sample (ms)"));
  CHECK(contains(html, "class=\"legend\""));
  CHECK(contains(html, "model.layers.11"));
  CHECK(contains(html, "checkpoint"));
  CHECK(contains(html, "offload activations"));
  CHECK(contains(html, "40.0"));  // parameters in GiB
  CHECK(contains(html, "Predicted vs measured"));
  CHECK(contains(html, "-1.1%"));  // reserved: 43.5 GiB predicted vs 44 GiB measured
  CHECK(contains(html, "-4.8%"));  // step: 1000 ms predicted vs 1050 ms measured (median after warm-up)
  // Names are escaped, never markup.
  CHECK_FALSE(contains(html, "<script>"));
  CHECK(contains(html, "toy&lt;script&gt;"));
  CHECK(contains(html, "backward &lt;layer 3&gt;"));
  CHECK_FALSE(contains(html, "<script"));
}

TEST_CASE("a 1024-block plan renders within a bounded size") {
  const planner::Plan plan = hand_made_plan(1024);
  ReportInput input;
  input.plan = &plan;
  input.gpu_name = "GPU";
  const std::string html = render_html_report(input);
  CHECK(html.size() < 5'000'000);
  CHECK(contains(html, "model.layers.1023"));
}

TEST_CASE("measurement files: round trip and clear refusals") {
  MeasuredRun run;
  run.device = "cpu";
  run.steps = {{1, 100, 200, 5.0, 3.0}, {2, 110, 210, 4.0, 2.5}, {3, 120, 220, 6.0, 2.0}};
  run.memory = {{0, 10, 20}, {1, 30, 40}};
  const Result<MeasuredRun> back = measured_run_from_json(measured_run_to_json(run), "m.json");
  REQUIRE(back.is_ok());
  CHECK(back->steps.size() == 3);
  CHECK(back->max_peak_reserved() == 220);
  CHECK(back->median_step_ms() == doctest::Approx(6.0));  // steps 2 and 3; the first is warm-up
  nlohmann::json bad = measured_run_to_json(run);
  bad["steps"][1]["peak_reserved_bytes"] = 5;
  const Result<MeasuredRun> refused = measured_run_from_json(bad, "m.json");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(contains(refused.message(), "m.json: steps[1].peak_reserved_bytes"));
  nlohmann::json empty = measured_run_to_json(run);
  empty["steps"] = nlohmann::json::array();
  CHECK_FALSE(measured_run_from_json(empty, "m.json").is_ok());
  CHECK_FALSE(measured_run_from_json(nlohmann::json::array(), "m.json").is_ok());
  CHECK_FALSE(load_measured_run("/nonexistent/m.json").is_ok());
}

}  // namespace headroom::reports
