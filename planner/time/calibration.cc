#include "planner/time/calibration.h"

#include <nlohmann/json.hpp>

#include "graph/atomic_file.h"
#include "graph/graph_json.h"

namespace headroom::planner {
namespace {

constexpr const char* kFormat = "headroom.calibration";

Status field_error(std::string_view origin, const std::string& field, const std::string& expected) {
  return Status::invalid_input(std::string(origin) + ": " + field + ": expected " + expected);
}

}  // namespace

nlohmann::json calibration_to_json(const Calibration& c) {
  nlohmann::json j{{"format", kFormat}, {"version", 1}, {"gpu", c.gpu}, {"source", c.source}};
  if (c.matmul_efficiency) j["matmul_efficiency"] = *c.matmul_efficiency;
  if (c.bandwidth_efficiency) j["bandwidth_efficiency"] = *c.bandwidth_efficiency;
  if (c.cuda_context_bytes) j["cuda_context_bytes"] = *c.cuda_context_bytes;
  return j;
}

Result<Calibration> calibration_from_json(const nlohmann::json& j, std::string_view origin) {
  if (!j.is_object()) return field_error(origin, "(top level)", "a JSON object");
  if (!j.contains("format") || j.at("format") != kFormat) return field_error(origin, "format", "\"headroom.calibration\"");
  if (!j.contains("version") || j.at("version") != 1) return field_error(origin, "version", "1");
  Calibration c;
  if (!j.contains("gpu") || !j.at("gpu").is_string()) return field_error(origin, "gpu", "a GPU id string");
  c.gpu = j.at("gpu").get<std::string>();
  if (j.contains("source")) {
    if (!j.at("source").is_string()) return field_error(origin, "source", "a string");
    c.source = j.at("source").get<std::string>();
  }
  for (const char* key : {"matmul_efficiency", "bandwidth_efficiency"}) {
    if (!j.contains(key)) continue;
    const auto& value = j.at(key);
    if (!value.is_number() || value.get<double>() <= 0 || value.get<double>() > 1) {
      return field_error(origin, key, "a fraction in (0, 1]");
    }
    (std::string(key) == "matmul_efficiency" ? c.matmul_efficiency : c.bandwidth_efficiency) = value.get<double>();
  }
  if (j.contains("cuda_context_bytes")) {
    const auto& value = j.at("cuda_context_bytes");
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (int64_t{1} << 40)) {
      return field_error(origin, "cuda_context_bytes", "a byte count between 0 and 1 TiB");
    }
    c.cuda_context_bytes = value.get<int64_t>();
  }
  for (const auto& [key, value] : j.items()) {
    static const char* known[] = {"format", "version", "gpu", "source", "matmul_efficiency", "bandwidth_efficiency", "cuda_context_bytes"};
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) return field_error(origin, key, "no such field (known: gpu, source, matmul_efficiency, bandwidth_efficiency, cuda_context_bytes)");
  }
  return c;
}

Result<Calibration> load_calibration(const std::string& path) {
  Result<std::string> text = graph::read_file(path, 1 << 20);
  if (!text.is_ok()) return text.status();
  Result<nlohmann::json> json = graph::parse_json_text(text.value(), path);
  if (!json.is_ok()) return json.status();
  return calibration_from_json(json.value(), path);
}

TimeModelOptions calibrated(const TimeModelOptions& defaults, const Calibration& calibration) {
  TimeModelOptions out = defaults;
  if (calibration.matmul_efficiency) out.matmul_efficiency = *calibration.matmul_efficiency;
  if (calibration.bandwidth_efficiency) out.bandwidth_efficiency = *calibration.bandwidth_efficiency;
  return out;
}

}  // namespace headroom::planner
