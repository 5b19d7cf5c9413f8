#include "bench/accuracy/measured_reading.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <utility>

namespace headroom::bench {
namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1073741824.0;  // 2^30

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool contains(std::string_view text, std::string_view word) {
  return text.find(word) != std::string_view::npos;
}

bool leaves_open(std::string_view text) {
  const std::string l = lower(text);
  return contains(l, "not stated") || contains(l, "unknown");
}

// The metric as the case's text names it; nullopt when it names none, several,
// or says it is not known. Keywords are torch's own names for the counters.
std::optional<MemoryMetric> stated_metric(std::string_view text) {
  if (leaves_open(text)) return std::nullopt;
  const std::string l = lower(text);
  static constexpr std::array<std::pair<std::string_view, MemoryMetric>, 4> kWords = {{
      {"max_memory_allocated", MemoryMetric::kAllocated},
      {"active", MemoryMetric::kActive},
      {"reserved", MemoryMetric::kReserved},
      {"nvidia-smi", MemoryMetric::kNvidiaSmi},
  }};
  std::optional<MemoryMetric> found;
  for (const auto& [word, metric] : kWords) {
    if (!contains(l, word)) continue;
    if (found) return std::nullopt;
    found = metric;
  }
  return found;
}

// "GiB" and "GB" are told apart by their spelling; a text with both ("GB (as
// printed; torchtune logs GiB)") or neither ("G") leaves the unit open.
std::optional<double> stated_unit(std::string_view text) {
  if (leaves_open(text)) return std::nullopt;
  const bool gib = contains(text, "GiB");
  const bool gb = contains(text, "GB");
  if (gib == gb) return std::nullopt;
  return gib ? kGiB : kGB;
}

std::optional<MemoryMetric> parse_metric(std::string_view name) {
  if (name == "allocated") return MemoryMetric::kAllocated;
  if (name == "active") return MemoryMetric::kActive;
  if (name == "reserved") return MemoryMetric::kReserved;
  if (name == "nvidia-smi") return MemoryMetric::kNvidiaSmi;
  return std::nullopt;
}

Status field_error(std::string_view origin, std::string_view field, std::string_view expected) {
  return Status::invalid_input(std::string(origin) + ": " + std::string(field) + ": " +
                               std::string(expected));
}

std::string format_value(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

Result<MeasuredMemory> read_measured_memory(const nlohmann::json& memory, int n_gpus,
                                            const nlohmann::json* reading,
                                            std::string_view case_origin,
                                            std::string_view translation_origin) {
  if (!memory.is_object() || !memory.contains("value") || !memory.at("value").is_number() ||
      !memory.contains("unit") || !memory.at("unit").is_string() || !memory.contains("metric") ||
      !memory.at("metric").is_string() || !memory.contains("per_gpu") ||
      !memory.at("per_gpu").is_boolean()) {
    return field_error(case_origin, "measured.memory",
                       "expected {value: number, unit, metric: strings, per_gpu: bool}");
  }
  const std::string unit_text = memory.at("unit").get<std::string>();
  const std::string metric_text = memory.at("metric").get<std::string>();
  std::optional<double> unit = stated_unit(unit_text);
  std::optional<MemoryMetric> metric = stated_metric(metric_text);
  std::string why;
  if (reading) {
    for (const auto& [key, value] : reading->items()) {
      if (key != "metric" && key != "unit" && key != "why") {
        return field_error(translation_origin, "memory_reading." + key,
                           "unknown field (expected metric, unit, why)");
      }
      if (!value.is_string() || value.get<std::string>().empty()) {
        return field_error(translation_origin, "memory_reading." + key,
                           "expected a non-empty string");
      }
    }
    if (!reading->contains("why")) {
      return field_error(translation_origin, "memory_reading.why",
                         "missing: say why the metric or unit is assumed");
    }
    why = reading->at("why").get<std::string>();
    if (reading->contains("metric")) {
      if (metric) {
        return field_error(
            translation_origin, "memory_reading.metric",
            "the source states its metric (\"" + metric_text + "\"); remove the assumption");
      }
      metric = parse_metric(reading->at("metric").get<std::string>());
      if (!metric)
        return field_error(translation_origin, "memory_reading.metric",
                           "expected allocated, active, reserved or nvidia-smi");
    }
    if (reading->contains("unit")) {
      if (unit) {
        return field_error(
            translation_origin, "memory_reading.unit",
            "the source states its unit (\"" + unit_text + "\"); remove the assumption");
      }
      const std::string name = reading->at("unit").get<std::string>();
      if (name != "GB" && name != "GiB")
        return field_error(translation_origin, "memory_reading.unit", "expected GB or GiB");
      unit = name == "GB" ? kGB : kGiB;
    }
  }
  if (!metric) {
    return field_error(translation_origin, "memory_reading.metric",
                       "missing: the source leaves the metric open (\"" + metric_text +
                           "\"); state the assumed one and why");
  }
  if (!unit) {
    return field_error(translation_origin, "memory_reading.unit",
                       "missing: the source leaves the unit open (\"" + unit_text +
                           "\"); state GB or GiB and why");
  }
  const bool per_gpu = memory.at("per_gpu").get<bool>();
  const double value = memory.at("value").get<double>();
  MeasuredMemory out;
  out.metric = *metric;
  out.bytes_per_gpu = value * *unit / (per_gpu ? 1 : n_gpus);
  out.as_published = format_value(value) + " " + unit_text.substr(0, unit_text.find(' ')) +
                     (per_gpu ? "" : " (sum over " + std::to_string(n_gpus) + " GPUs)");
  out.assumption = why;
  return out;
}

namespace {

// The translation's claim that a tokens/s figure is the whole job's. Allowed
// only where the case itself leaves it open (its unknowns name "aggregate").
Result<bool> tokens_are_whole_job(const nlohmann::json* reading,
                                  const std::vector<std::string>& unknowns,
                                  std::string_view origin) {
  if (!reading) return false;
  if (!reading->is_object()) return field_error(origin, "time_reading", "expected an object");
  for (const auto& [key, value] : reading->items()) {
    if (key != "tokens_per_s" && key != "why") {
      return field_error(origin, "time_reading." + key,
                         "unknown field (expected tokens_per_s, why)");
    }
  }
  if (!reading->contains("why") || !reading->at("why").is_string() ||
      reading->at("why").get<std::string>().empty()) {
    return field_error(origin, "time_reading.why",
                       "missing: say why the throughput is read this way");
  }
  if (!reading->contains("tokens_per_s") || reading->at("tokens_per_s") != "job") {
    return field_error(origin, "time_reading.tokens_per_s",
                       "expected \"job\" (per GPU is the default reading)");
  }
  const bool left_open = std::any_of(unknowns.begin(), unknowns.end(), [](const std::string& u) {
    return contains(lower(u), "aggregate");
  });
  if (!left_open) {
    return field_error(origin, "time_reading",
                       "the case does not leave per GPU vs whole job open; remove it");
  }
  return true;
}

}  // namespace

Result<std::optional<MeasuredTime>> read_measured_time(const nlohmann::json& time,
                                                       const nlohmann::json* reading,
                                                       const std::vector<std::string>& unknowns,
                                                       std::string_view case_origin,
                                                       std::string_view translation_origin) {
  Result<bool> whole_job = tokens_are_whole_job(reading, unknowns, translation_origin);
  if (!whole_job.is_ok()) return whole_job.status();
  if (time.is_null()) {
    if (reading)
      return field_error(translation_origin, "time_reading",
                         "the case publishes no time; remove it");
    return std::optional<MeasuredTime>{};
  }
  if (!time.is_object())
    return field_error(case_origin, "measured.time", "expected an object or null");
  // In order of preference. HF Trainer's train_samples_per_second and the
  // images/s of a single-GPU loop are whole-job rates; step times cover the
  // whole accumulation loop and the optimizer.
  static constexpr std::array<std::pair<std::string_view, TimeKind>, 7> kKeys = {{
      {"tokens_per_s_per_gpu", TimeKind::kTokensPerSecondPerGpu},
      {"tokens_per_s", TimeKind::kTokensPerSecondPerGpu},
      {"samples_per_s", TimeKind::kSamplesPerSecondJob},
      {"images_per_s", TimeKind::kSamplesPerSecondJob},
      {"seconds_per_iter", TimeKind::kStepSeconds},
      {"seconds_per_step", TimeKind::kStepSeconds},
      {"seconds_per_optimizer_step", TimeKind::kStepSeconds},
  }};
  for (auto [key, kind] : kKeys) {
    if (!time.contains(key)) continue;
    if (!time.at(key).is_number() || !(time.at(key).get<double>() > 0)) {
      return field_error(case_origin, "measured.time." + std::string(key),
                         "expected a positive number");
    }
    if (whole_job.value() && key != "tokens_per_s") {
      return field_error(translation_origin, "time_reading",
                         "applies to tokens_per_s, which this case does not publish");
    }
    if (key == "tokens_per_s" && whole_job.value()) {
      kind = TimeKind::kTokensPerSecondJob;
    } else if (key == "tokens_per_s") {
      // A bare tokens/s is per GPU only when its definition says so (torchtune
      // logs tokens_per_second_per_gpu).
      const bool per_gpu = time.contains("definition") && time.at("definition").is_string() &&
                           contains(time.at("definition").get<std::string>(), "per_gpu");
      if (!per_gpu) {
        return field_error(
            case_origin, "measured.time.tokens_per_s",
            "the definition does not say per GPU or whole job; state it in time_reading");
      }
    }
    const std::string why =
        whole_job.value() ? reading->at("why").get<std::string>() : std::string();
    return std::optional<MeasuredTime>{
        MeasuredTime{time.at(key).get<double>(), kind, std::string(key), why}};
  }
  if (reading)
    return field_error(translation_origin, "time_reading",
                       "applies to tokens_per_s, which this case does not publish");
  return std::optional<MeasuredTime>{};
}

}  // namespace headroom::bench
