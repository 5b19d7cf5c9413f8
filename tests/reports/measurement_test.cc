// The measurement file (docs/report.md): round trip, the summary the report
// uses, and a clear refusal naming the file and the field for malformed,
// truncated, hostile and huge input.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "reports/measured_run.h"

namespace headroom::reports {
namespace {

MeasuredRun three_steps() {
  MeasuredRun run;
  run.device = "cpu";
  run.driver = "-";
  run.torch_version = "2.11.0";
  run.date = "2026-11-22";
  run.steps = {{1, 100, 200, 5.0, 3.0}, {2, 110, 210, 4.0, 2.5}, {3, 120, 220, 6.0, 2.0}};
  run.memory = {{0, 10, 20}, {1, 30, 40}, {1, 25, 40}};
  return run;
}

// The message for `json` with one change applied, "" when it is accepted.
std::string refusal(const nlohmann::json& json) {
  const Result<MeasuredRun> result = measured_run_from_json(json, "m.json");
  return result.is_ok() ? "" : result.message();
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = std::string(P_tmpdir) + "/headroom_measurement_test_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace

TEST_CASE("a measurement survives JSON and back, field by field") {
  const MeasuredRun run = three_steps();
  const Result<MeasuredRun> back = measured_run_from_json(measured_run_to_json(run), "m.json");
  REQUIRE(back.is_ok());
  CHECK(back->device == "cpu");
  CHECK(back->torch_version == "2.11.0");
  CHECK(back->date == "2026-11-22");
  REQUIRE(back->steps.size() == 3);
  CHECK(back->steps[2].step == 3);
  CHECK(back->steps[2].peak_allocated == 120);
  CHECK(back->steps[2].peak_reserved == 220);
  CHECK(back->steps[2].step_ms == 6.0);
  CHECK(back->steps[2].loss == 2.0);
  REQUIRE(back->memory.size() == 3);
  CHECK(back->memory[1].time_ms == 1.0);
  CHECK(back->memory[1].allocated == 30);
  CHECK(measured_run_to_json(back.value()) == measured_run_to_json(run));
}

TEST_CASE("the summary: highest peaks, median step time after the warm-up step") {
  const MeasuredRun run = three_steps();
  CHECK(run.max_peak_allocated() == 120);
  CHECK(run.max_peak_reserved() == 220);
  CHECK(run.median_step_ms() == doctest::Approx(6.0));  // steps 2 and 3 (4, 6 ms): the upper median
  MeasuredRun one;
  one.steps = {{1, 1, 2, 7.5, 0}};
  CHECK(one.median_step_ms() == doctest::Approx(7.5));  // a single step is all there is
  CHECK(MeasuredRun{}.median_step_ms() == 0);
}

TEST_CASE("optional fields may be left out") {
  const nlohmann::json minimal = {
      {"format", "headroom.measurement"},
      {"version", 1},
      {"steps",
       {{{"step", 1}, {"peak_allocated_bytes", 5}, {"peak_reserved_bytes", 5}, {"step_ms", 1.5}}}}};
  const Result<MeasuredRun> run = measured_run_from_json(minimal, "m.json");
  REQUIRE(run.is_ok());
  CHECK(run->device.empty());
  CHECK(run->memory.empty());
  CHECK(run->steps[0].loss == 0);
}

TEST_CASE("malformed measurements are refused with the file and the field") {
  const nlohmann::json good = measured_run_to_json(three_steps());
  struct Case {
    const char* what;
    nlohmann::json json;
    const char* message;
  };
  auto with = [&](auto change) {
    nlohmann::json json = good;
    change(json);
    return json;
  };
  const Case cases[] = {
      {"not an object", nlohmann::json::array(), "m.json: (top level): expected a JSON object"},
      {"another format", with([](auto& j) { j["format"] = "headroom.plan"; }),
       "m.json: format: expected"},
      {"no format", with([](auto& j) { j.erase("format"); }), "m.json: format: expected"},
      {"a format that is not a string (issue 14: a type_error abort)", with([](auto& j) { j["format"] = 1; }),
       "m.json: format: expected"},
      {"a future version", with([](auto& j) { j["version"] = 2; }), "m.json: version: expected 1"},
      {"device a number", with([](auto& j) { j["device"] = 7; }),
       "m.json: device: expected a string"},
      {"no steps", with([](auto& j) { j.erase("steps"); }),
       "m.json: steps: expected a non-empty array"},
      {"empty steps", with([](auto& j) { j["steps"] = nlohmann::json::array(); }),
       "m.json: steps: expected"},
      {"a step not an object", with([](auto& j) { j["steps"][1] = 3; }),
       "m.json: steps[1]: expected an object"},
      {"bytes missing", with([](auto& j) { j["steps"][0].erase("peak_allocated_bytes"); }),
       "m.json: steps[0].peak_allocated_bytes: expected an integer >= 0"},
      {"bytes as text", with([](auto& j) { j["steps"][0]["peak_reserved_bytes"] = "200"; }),
       "m.json: steps[0].peak_reserved_bytes: expected an integer >= 0"},
      {"negative bytes", with([](auto& j) { j["steps"][2]["peak_allocated_bytes"] = -1; }),
       "m.json: steps[2].peak_allocated_bytes: expected an integer >= 0"},
      {"fractional bytes", with([](auto& j) { j["steps"][0]["peak_allocated_bytes"] = 1.5; }),
       "m.json: steps[0].peak_allocated_bytes: expected an integer >= 0"},
      {"reserved below allocated", with([](auto& j) { j["steps"][1]["peak_reserved_bytes"] = 5; }),
       "m.json: steps[1].peak_reserved_bytes: expected at least peak_allocated_bytes"},
      {"negative time", with([](auto& j) { j["steps"][0]["step_ms"] = -0.5; }),
       "m.json: steps[0].step_ms: expected a number >= 0"},
      {"loss as text", with([](auto& j) { j["steps"][0]["loss"] = "low"; }),
       "m.json: steps[0].loss: expected a number"},
      {"a step past int", with([](auto& j) { j["steps"][0]["step"] = int64_t{1} << 40; }),
       "m.json: steps[0].step: expected a step number below 2^31"},
      {"a byte count past int64",
       with([](auto& j) { j["steps"][0]["peak_reserved_bytes"] = UINT64_MAX; }),
       "m.json: steps[0].peak_reserved_bytes: expected an integer >= 0"},
      {"memory not an array", with([](auto& j) { j["memory"] = "curve"; }),
       "m.json: memory: expected an array"},
      {"a sample not an object", with([](auto& j) { j["memory"][0] = 1; }),
       "m.json: memory[0]: expected an object"},
      {"a sample without time", with([](auto& j) { j["memory"][1].erase("time_ms"); }),
       "m.json: memory[1].time_ms: expected a number >= 0"},
      {"a sample with negative bytes",
       with([](auto& j) { j["memory"][2]["allocated_bytes"] = -4; }),
       "m.json: memory[2].allocated_bytes: expected an integer >= 0"},
      {"a sample reserved below allocated",
       with([](auto& j) { j["memory"][1]["reserved_bytes"] = 1; }),
       "m.json: memory[1].reserved_bytes: expected at least allocated_bytes"},
      {"samples going back in time", with([](auto& j) { j["memory"][2]["time_ms"] = 0.5; }),
       "m.json: memory[2].time_ms: expected samples in time order"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string message = refusal(c.json);
    CHECK_MESSAGE(message.find(c.message) == 0, message);
  }
}

TEST_CASE("measurement files: missing, truncated, not JSON, huge numbers") {
  const Result<MeasuredRun> missing = load_measured_run("/nonexistent/m.json");
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.message().find("/nonexistent/m.json") != std::string::npos);

  const std::string full = measured_run_to_json(three_steps()).dump();
  const std::string truncated = write_temp("truncated.json", full.substr(0, full.size() / 2));
  const Result<MeasuredRun> cut = load_measured_run(truncated);
  REQUIRE_FALSE(cut.is_ok());
  CHECK(cut.message().find(truncated) != std::string::npos);

  const Result<MeasuredRun> text = load_measured_run(write_temp("text.json", "step 1: 40 GiB\n"));
  CHECK_FALSE(text.is_ok());
  const Result<MeasuredRun> empty = load_measured_run(write_temp("empty.json", ""));
  CHECK_FALSE(empty.is_ok());

  std::string overflow = full;
  overflow.replace(overflow.find("6.0"), 3, "1e999");  // a step time no double holds
  const Result<MeasuredRun> huge = load_measured_run(write_temp("overflow.json", overflow));
  CHECK_FALSE(huge.is_ok());

  const std::string path = write_temp("good.json", full);
  const Result<MeasuredRun> good = load_measured_run(path);
  REQUIRE(good.is_ok());
  CHECK(good->steps.size() == 3);
  for (const char* name :
       {"truncated.json", "text.json", "empty.json", "overflow.json", "good.json"}) {
    std::remove((std::string(P_tmpdir) + "/headroom_measurement_test_" + name).c_str());
  }
}

TEST_CASE("the example measurement in tests/data loads") {
  const Result<MeasuredRun> run =
      load_measured_run(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/measurement_example.json");
  REQUIRE(run.is_ok());
  CHECK(run->steps.size() == 2);
  CHECK(run->max_peak_reserved() == 47781511168);
}

}  // namespace headroom::reports

TEST_CASE("fuzz regressions of the measurement reader are refused cleanly") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(HEADROOM_SOURCE_DIR) / "tests/data/fuzz_regressions/fuzz_measurement";
  int replayed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    CAPTURE(entry.path().string());
    const headroom::Result<headroom::reports::MeasuredRun> run =
        headroom::reports::load_measured_run(entry.path().string());
    CHECK_FALSE(run.is_ok());
    CHECK(run.message().find(entry.path().string()) == 0);
    ++replayed;
  }
  CHECK(replayed > 0);
}
