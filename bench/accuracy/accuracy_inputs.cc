#include "bench/accuracy/accuracy_inputs.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "bench/accuracy/measured_reading.h"
#include "graph/atomic_file.h"
#include "graph/graph_json.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/stack_mechanisms.h"

namespace headroom::bench {
namespace {

using nlohmann::json;

Status field_error(std::string_view origin, std::string_view field, std::string_view expected) {
  return Status::invalid_input(std::string(origin) + ": " + std::string(field) + ": " +
                               std::string(expected));
}

Result<json> read_json(const std::string& path) {
  Result<std::string> text = graph::read_file(path);
  if (!text.is_ok()) return text.status();
  return graph::parse_json_text(text.value(), path);
}

Result<std::string> string_field(const json& object, std::string_view key, std::string_view origin,
                                 bool required = true) {
  const std::string name(key);
  if (!object.contains(name)) {
    if (required) return field_error(origin, key, "missing (expected a string)");
    return std::string();
  }
  if (!object.at(name).is_string()) return field_error(origin, key, "expected a string");
  return object.at(name).get<std::string>();
}

Result<std::vector<std::string>> strings_field(const json& object, std::string_view key,
                                               std::string_view origin) {
  const std::string name(key);
  std::vector<std::string> out;
  if (!object.contains(name)) return out;
  if (!object.at(name).is_array()) return field_error(origin, key, "expected a list of strings");
  for (const json& item : object.at(name)) {
    if (!item.is_string() || item.get<std::string>().empty()) {
      return field_error(origin, key, "expected a list of non-empty strings");
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

// The RunSettings fields settings_from_json reads, taken from settings_to_json
// and the table of stack mechanisms (whose settings are unset by default), so
// that a field added there is known here without an edit; the optional fields
// outside the table are set here to be written. `model` is the
// translation's own field, so a second copy inside settings is refused.
const std::set<std::string>& settings_keys() {
  static const std::set<std::string> keys = [] {
    planner::RunSettings every;
    every.dropout = 0.0;
    every.gpu_memory_bytes = 1;
    every.cuda_context_bytes = 1;
    every.calibration_file = "x";
    every.document_tokens = 1;
    every.shortest_sample = 1;
    every.shard_gpus = 1;
    every.text_tokens = 1;
    every.float8 = planner::Float8Recipe::kTensorwise;
    every.float8_all_gather = true;
    every.quant = planner::QuantFormat::kGptq;
    every.sharding = planner::Sharding::kFsdp1;
    every.reduce_dtype = planner::ReduceDtype::kFp32;
    every.cpu_offload = planner::CpuOffloadImpl::kTorchao;
    every.fsdp_wrap = planner::FsdpWrap::kModel;
    every.host_ram_bytes = 1;
    every.versions["torchtune"] = "0.5.0";
    every.disk_free_bytes = 1;
    const json every_json =
        planner::settings_to_json(every);  // named: items() does not extend a temporary
    std::set<std::string> out;
    for (const auto& [key, value] : every_json.items()) out.insert(key);
    for (const planner::MechanismRow& row : planner::stack_mechanisms()) out.insert(row.key);
    out.erase("model");
    return out;
  }();
  return keys;
}

Status check_settings_keys(const json& settings, std::string_view origin) {
  for (const auto& [key, value] : settings.items()) {
    if (!settings_keys().contains(key)) {
      return field_error(
          origin, "settings." + key,
          key == "model" ? "give the model as the translation's \"model\" field, not in settings"
                         : "unknown RunSettings field (docs/cli-json.md#runsettings)");
    }
  }
  if (settings.contains("lora") && settings.at("lora").is_object()) {
    for (const auto& [key, value] : settings.at("lora").items()) {
      if (key != "rank" && key != "targets" && key != "dropout") {
        return field_error(origin, "settings.lora." + key,
                           "unknown field (expected rank, targets, dropout)");
      }
    }
  }
  return Status::ok();
}

Result<Expressible> parse_expressible(const json& entry, std::string_view origin) {
  Result<std::string> text = string_field(entry, "expressible", origin);
  if (!text.is_ok()) return text.status();
  if (text.value() == "exact") return Expressible::kExact;
  if (text.value() == "approximate") return Expressible::kApproximate;
  if (text.value() == "no") return Expressible::kNo;
  return field_error(origin, "expressible",
                     "expected \"exact\", \"approximate\" or \"no\", got \"" + text.value() + "\"");
}

// "missing": required where the translation is not exact, refused where it is.
Result<Missing> parse_missing(const json& entry, Expressible expressible, std::string_view origin) {
  if (expressible == Expressible::kExact) {
    if (entry.contains("missing")) {
      return field_error(origin, "missing", "only for approximate and no translations; an exact one misses nothing");
    }
    return Missing::kNothing;
  }
  Result<std::string> text = string_field(entry, "missing", origin);
  if (!text.is_ok()) return text.status();
  if (text.value() == "information") return Missing::kInformation;
  if (text.value() == "feature") return Missing::kFeature;
  return field_error(origin, "missing", "expected \"information\" or \"feature\", got \"" + text.value() + "\"");
}

// A zoo name stays as it is; a path is relative to the translations file.
std::string resolve_model(const std::string& model, const std::string& translations_path) {
  if (model.find('/') == std::string::npos && !model.ends_with(".json")) return model;
  if (std::filesystem::path(model).is_absolute()) return model;
  return (std::filesystem::path(translations_path).parent_path() / model)
      .lexically_normal()
      .string();
}

Status read_translation(const json& entry, const std::string& path, BenchCase& out) {
  const std::string origin = path + ": " + out.id;
  static const std::set<std::string> kKeys = {
      "id",       "stack",          "model",        "expressible",         "gaps",   "missing",
      "settings", "memory_reading", "time_reading", "time_not_comparable", "notes"};
  for (const auto& [key, value] : entry.items()) {
    if (!kKeys.contains(key)) return field_error(origin, key, "unknown field of a translation");
  }
  Result<std::string> stack = string_field(entry, "stack", origin);
  Result<Expressible> expressible = parse_expressible(entry, origin);
  Result<std::vector<std::string>> gaps = strings_field(entry, "gaps", origin);
  Result<std::string> notes = string_field(entry, "notes", origin, false);
  Result<std::string> model = string_field(entry, "model", origin, false);
  Result<std::string> not_comparable = string_field(entry, "time_not_comparable", origin, false);
  for (const Status& s : {stack.status(), expressible.status(), gaps.status(), notes.status(),
                          model.status(), not_comparable.status()}) {
    if (!s.is_ok()) return s;
  }
  if (stack.value().empty())
    return field_error(origin, "stack", "expected the stack the case ran, e.g. \"torchtune\"");
  out.stack = stack.value();
  out.expressible = expressible.value();
  out.gaps = gaps.value();
  Result<Missing> missing = parse_missing(entry, out.expressible, origin);
  if (!missing.is_ok()) return missing.status();
  out.missing = missing.value();
  out.notes = notes.value();
  out.time_not_comparable = not_comparable.value();
  if (out.expressible == Expressible::kExact && !out.gaps.empty()) {
    return field_error(origin, "gaps",
                       "an exact translation has no gaps; make it approximate or drop the gaps");
  }
  if (out.expressible != Expressible::kExact && out.gaps.empty()) {
    return field_error(origin, "gaps",
                       "expected at least one gap naming what headroom cannot express");
  }
  if (entry.contains("settings")) {
    if (!entry.at("settings").is_object())
      return field_error(origin, "settings", "expected a RunSettings object");
    const Status keys = check_settings_keys(entry.at("settings"), origin);
    if (!keys.is_ok()) return keys;
  }
  if (out.expressible == Expressible::kNo) return Status::ok();
  if (model.value().empty())
    return field_error(origin, "model", "missing (expected a zoo name or a config.json path)");
  if (!entry.contains("settings"))
    return field_error(origin, "settings", "missing (expected a RunSettings object)");
  Result<planner::RunSettings> settings = planner::settings_from_json(entry.at("settings"), origin);
  if (!settings.is_ok()) return settings.status();
  out.model = resolve_model(model.value(), path);
  const bool is_path = out.model.find('/') != std::string::npos || out.model.ends_with(".json");
  if (is_path && !std::filesystem::is_regular_file(out.model)) {
    return field_error(origin, "model", "no such file: " + out.model);
  }
  out.settings = settings.value();
  out.settings->model = out.model;
  return Status::ok();
}

Status read_case_facts(const json& c, const std::string& path, BenchCase& out) {
  const std::string origin = path + ": " + out.id;
  Result<std::string> trust = string_field(c, "trust", origin);
  if (!trust.is_ok()) return trust.status();
  if (trust.value() != "high" && trust.value() != "medium" && trust.value() != "low") {
    return field_error(origin, "trust", "expected high, medium or low");
  }
  out.trust = trust.value();
  Result<std::string> reason = string_field(c, "trust_reason", origin, false);
  Result<std::vector<std::string>> unknowns = strings_field(c, "unknowns", origin);
  Result<std::string> notes = string_field(c, "notes", origin, false);
  for (const Status& s : {reason.status(), unknowns.status(), notes.status()}) {
    if (!s.is_ok()) return s;
  }
  out.trust_reason = reason.value();
  out.unknowns = unknowns.value();
  if (!c.contains("n_gpus") || !c.at("n_gpus").is_number_integer() ||
      c.at("n_gpus").get<int64_t>() < 1) {
    return field_error(origin, "n_gpus", "expected an integer >= 1");
  }
  out.n_gpus = c.at("n_gpus").get<int>();
  if (!c.contains("measured") || !c.at("measured").is_object())
    return field_error(origin, "measured", "expected an object");
  const json& memory = c.at("measured").value("memory", json());
  if (memory.is_object() && memory.contains("value") && memory.contains("unit") &&
      memory.at("unit").is_string()) {
    out.raw_memory = memory.at("value").dump() + " " + memory.at("unit").get<std::string>();
  }
  return Status::ok();
}

// Reads what was measured, once the translation says how to read it.
Status read_measurements(const json& c, const json& entry, const std::string& cases_path,
                         const std::string& translations_path, BenchCase& out) {
  const std::string case_origin = cases_path + ": " + out.id;
  const std::string translation_origin = translations_path + ": " + out.id;
  const json& measured = c.at("measured");
  const json memory = measured.value("memory", json());
  const json* reading = entry.contains("memory_reading") ? &entry.at("memory_reading") : nullptr;
  if (reading && !reading->is_object())
    return field_error(translation_origin, "memory_reading", "expected an object");
  if (memory.is_null() && reading) {
    return field_error(translation_origin, "memory_reading",
                       "the case publishes no memory; remove it");
  }
  if (!memory.is_null() && out.expressible != Expressible::kNo) {
    Result<MeasuredMemory> read =
        read_measured_memory(memory, out.n_gpus, reading, case_origin, translation_origin);
    if (!read.is_ok()) return read.status();
    out.memory = read.value();
  }
  if (out.expressible != Expressible::kNo) {
    const json* time_reading = entry.contains("time_reading") ? &entry.at("time_reading") : nullptr;
    Result<std::optional<MeasuredTime>> time =
        read_measured_time(measured.value("time", json()), time_reading, out.unknowns, case_origin,
                           translation_origin);
    if (!time.is_ok()) return time.status();
    out.time = time.value();
  }
  return Status::ok();
}

}  // namespace

std::string_view expressible_name(Expressible value) {
  switch (value) {
    case Expressible::kExact:
      return "exact";
    case Expressible::kApproximate:
      return "approximate";
    case Expressible::kNo:
      return "no";
  }
  return "?";
}

std::string_view metric_name(MemoryMetric value) {
  switch (value) {
    case MemoryMetric::kAllocated:
      return "allocated";
    case MemoryMetric::kActive:
      return "active";
    case MemoryMetric::kReserved:
      return "reserved";
    case MemoryMetric::kNvidiaSmi:
      return "nvidia-smi";
  }
  return "?";
}

Result<std::vector<BenchCase>> load_bench_cases(const std::string& cases_path,
                                                const std::string& translations_path) {
  Result<json> cases = read_json(cases_path);
  if (!cases.is_ok()) return cases.status();
  Result<json> translations = read_json(translations_path);
  if (!translations.is_ok()) return translations.status();
  if (!cases->is_object() || !cases->contains("cases") || !cases->at("cases").is_array()) {
    return field_error(cases_path, "cases", "expected a list of cases");
  }
  if (!translations->is_object() || !translations->contains("translations") ||
      !translations->at("translations").is_array()) {
    return field_error(translations_path, "translations", "expected a list of translations");
  }
  std::map<std::string, const json*> by_id;
  for (size_t i = 0; i < translations->at("translations").size(); ++i) {
    const json& entry = translations->at("translations")[i];
    const std::string where = "translations[" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.contains("id") || !entry.at("id").is_string()) {
      return field_error(translations_path, where + ".id", "expected a case id");
    }
    if (!by_id.emplace(entry.at("id").get<std::string>(), &entry).second) {
      return field_error(translations_path, where + ".id",
                         "\"" + entry.at("id").get<std::string>() + "\" is translated twice");
    }
  }
  std::vector<BenchCase> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < cases->at("cases").size(); ++i) {
    const json& c = cases->at("cases")[i];
    if (!c.is_object() || !c.contains("id") || !c.at("id").is_string()) {
      return field_error(cases_path, "cases[" + std::to_string(i) + "].id", "expected a string");
    }
    BenchCase bench_case;
    bench_case.id = c.at("id").get<std::string>();
    if (!seen.insert(bench_case.id).second)
      return field_error(cases_path, bench_case.id, "id appears twice");
    const auto found = by_id.find(bench_case.id);
    if (found == by_id.end()) {
      return field_error(translations_path, bench_case.id,
                         "no translation for this case (add one, with expressible \"no\" and its "
                         "reason if need be)");
    }
    for (const Status& s : {read_case_facts(c, cases_path, bench_case),
                            read_translation(*found->second, translations_path, bench_case)}) {
      if (!s.is_ok()) return s;
    }
    const Status measured =
        read_measurements(c, *found->second, cases_path, translations_path, bench_case);
    if (!measured.is_ok()) return measured;
    out.push_back(std::move(bench_case));
  }
  for (const auto& [id, entry] : by_id) {
    if (!seen.contains(id))
      return field_error(translations_path, id,
                         "translates a case that the published file does not have");
  }
  return out;
}

}  // namespace headroom::bench
