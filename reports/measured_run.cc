#include "reports/measured_run.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "graph/atomic_file.h"
#include "graph/graph_json.h"

namespace headroom::reports {
namespace {

constexpr const char* kFormat = "headroom.measurement";

Status bad(std::string_view origin, const std::string& field, const std::string& expected) {
  return Status::error(std::string(origin) + ": " + field + ": expected " + expected);
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
  if (j.value("format", "") != kFormat) return bad(origin, "format", "\"headroom.measurement\"");
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
      if (!s.contains(key) || !s.at(key).is_number_integer() || s.at(key).get<int64_t>() < 0) {
        return bad(origin, field + "." + key, "an integer >= 0");
      }
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
      const auto& m = j.at("memory")[i];
      const std::string field = "memory[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("time_ms") || !m.at("time_ms").is_number() ||
          !m.contains("allocated_bytes") || !m.at("allocated_bytes").is_number_integer() ||
          !m.contains("reserved_bytes") || !m.at("reserved_bytes").is_number_integer()) {
        return bad(origin, field, "{\"time_ms\": number, \"allocated_bytes\": integer, \"reserved_bytes\": integer}");
      }
      run.memory.push_back({m.at("time_ms").get<double>(), m.at("allocated_bytes").get<int64_t>(),
                            m.at("reserved_bytes").get<int64_t>()});
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

}  // namespace headroom::reports
