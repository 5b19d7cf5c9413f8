#include "planner/predict/measurement.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "graph/atomic_file.h"
#include "graph/graph_json.h"

namespace headroom::planner {
namespace {

constexpr const char* kFormat = "headroom.measurement";

Status bad(std::string_view origin, const std::string& field, const std::string& expected) {
  return Status::invalid_input(std::string(origin) + ": " + field + ": expected " + expected);
}

bool is_count(const nlohmann::json& object, const char* key) {
  return object.contains(key) && object.at(key).is_number_integer() && object.at(key).get<int64_t>() >= 0;
}

// One point of the measured memory curve; times must not go backwards.
Status read_sample(const nlohmann::json& m, const std::string& field, std::string_view origin,
                   std::vector<MeasuredSample>& memory) {
  if (!m.is_object()) return bad(origin, field, "an object {\"time_ms\", \"allocated_bytes\", \"reserved_bytes\"}");
  if (!m.contains("time_ms") || !m.at("time_ms").is_number() || m.at("time_ms").get<double>() < 0) {
    return bad(origin, field + ".time_ms", "a number >= 0");
  }
  for (const char* key : {"allocated_bytes", "reserved_bytes"}) {
    if (!is_count(m, key)) return bad(origin, field + "." + key, "an integer >= 0");
  }
  const MeasuredSample sample{m.at("time_ms").get<double>(), m.at("allocated_bytes").get<int64_t>(),
                              m.at("reserved_bytes").get<int64_t>()};
  if (sample.reserved < sample.allocated) {
    return bad(origin, field + ".reserved_bytes", "at least allocated_bytes (reserved includes allocated)");
  }
  if (!memory.empty() && sample.time_ms < memory.back().time_ms) {
    return bad(origin, field + ".time_ms", "samples in time order (not before the previous sample)");
  }
  memory.push_back(sample);
  return Status::ok();
}

}  // namespace

int64_t MeasuredRun::max_peak_reserved() const {
  int64_t peak = 0;
  for (const MeasuredStep& step : steps) peak = std::max(peak, step.peak_reserved);
  return peak;
}

int64_t MeasuredRun::max_peak_allocated() const {
  int64_t peak = 0;
  for (const MeasuredStep& step : steps) peak = std::max(peak, step.peak_allocated);
  return peak;
}

double MeasuredRun::median_step_ms() const {
  std::vector<double> times;
  for (size_t i = steps.size() > 1 ? 1 : 0; i < steps.size(); ++i) times.push_back(steps[i].step_ms);
  if (times.empty()) return 0;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

nlohmann::json measured_run_to_json(const MeasuredRun& run) {
  nlohmann::json steps = nlohmann::json::array();
  for (const MeasuredStep& s : run.steps) {
    steps.push_back({{"step", s.step}, {"peak_allocated_bytes", s.peak_allocated},
                     {"peak_reserved_bytes", s.peak_reserved}, {"step_ms", s.step_ms}, {"loss", s.loss}});
  }
  nlohmann::json memory = nlohmann::json::array();
  for (const MeasuredSample& m : run.memory) {
    memory.push_back({{"time_ms", m.time_ms}, {"allocated_bytes", m.allocated}, {"reserved_bytes", m.reserved}});
  }
  return {{"format", kFormat}, {"version", 1},        {"device", run.device}, {"driver", run.driver},
          {"torch_version", run.torch_version},        {"date", run.date},     {"steps", steps},
          {"memory", memory}};
}

Result<MeasuredRun> measured_run_from_json(const nlohmann::json& j, std::string_view origin) {
  if (!j.is_object()) return bad(origin, "(top level)", "a JSON object");
  // Compared as JSON: a format of another type is a mismatch, not a type_error (issue 14, found by fuzzing).
  if (!j.contains("format") || j.at("format") != kFormat) return bad(origin, "format", "\"headroom.measurement\"");
  if (!j.contains("version") || j.at("version") != 1) return bad(origin, "version", "1");
  MeasuredRun run;
  for (const auto& [key, target] : {std::pair<const char*, std::string*>{"device", &run.device},
                                    {"driver", &run.driver},
                                    {"torch_version", &run.torch_version},
                                    {"date", &run.date}}) {
    if (!j.contains(key)) continue;
    if (!j.at(key).is_string()) return bad(origin, key, "a string");
    *target = j.at(key).get<std::string>();
  }
  if (!j.contains("steps") || !j.at("steps").is_array() || j.at("steps").empty()) {
    return bad(origin, "steps", "a non-empty array of measured steps");
  }
  for (size_t i = 0; i < j.at("steps").size(); ++i) {
    const auto& s = j.at("steps")[i];
    const std::string field = "steps[" + std::to_string(i) + "]";
    if (!s.is_object()) return bad(origin, field, "an object");
    MeasuredStep step;
    for (const char* key : {"step", "peak_allocated_bytes", "peak_reserved_bytes"}) {
      if (!is_count(s, key)) return bad(origin, field + "." + key, "an integer >= 0");
    }
    if (s.at("step").get<int64_t>() > std::numeric_limits<int>::max()) {
      return bad(origin, field + ".step", "a step number below 2^31");
    }
    if (!s.contains("step_ms") || !s.at("step_ms").is_number() || s.at("step_ms").get<double>() < 0) {
      return bad(origin, field + ".step_ms", "a number >= 0");
    }
    step.step = s.at("step").get<int>();
    step.peak_allocated = s.at("peak_allocated_bytes").get<int64_t>();
    step.peak_reserved = s.at("peak_reserved_bytes").get<int64_t>();
    step.step_ms = s.at("step_ms").get<double>();
    if (s.contains("loss")) {
      if (!s.at("loss").is_number()) return bad(origin, field + ".loss", "a number");
      step.loss = s.at("loss").get<double>();
    }
    if (step.peak_reserved < step.peak_allocated) {
      return bad(origin, field + ".peak_reserved_bytes", "at least peak_allocated_bytes (reserved includes allocated)");
    }
    run.steps.push_back(step);
  }
  if (j.contains("memory")) {
    if (!j.at("memory").is_array()) return bad(origin, "memory", "an array of samples");
    for (size_t i = 0; i < j.at("memory").size(); ++i) {
      Status status = read_sample(j.at("memory")[i], "memory[" + std::to_string(i) + "]", origin, run.memory);
      if (!status.is_ok()) return status;
    }
  }
  return run;
}

Result<MeasuredRun> load_measured_run(const std::string& path) {
  Result<std::string> text = graph::read_file(path, int64_t{256} << 20);
  if (!text.is_ok()) return text.status();
  Result<nlohmann::json> json = graph::parse_json_text(text.value(), path);
  if (!json.is_ok()) return json.status();
  return measured_run_from_json(json.value(), path);
}

}  // namespace headroom::planner
