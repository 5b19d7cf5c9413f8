#include "planner/configs/peft_import.h"

#include <nlohmann/json.hpp>

#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "graph/utf8.h"
#include "planner/configs/args_reader.h"
#include "planner/settings/lora_targets.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// target_modules: a list of names or PEFT's "all-linear" shorthand.
void read_peft_targets(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  const json& targets = r.raw("target_modules");
  if (targets.is_array()) {
    s.lora.targets.clear();
    for (const json& t : targets) {
      if (!t.is_string()) {
        r.fail("target_modules", "module names", targets);
        break;
      }
      s.lora.targets.push_back(t.get<std::string>());
    }
  } else if (targets == json("all-linear")) {
    s.lora.targets = {std::string(kAllLinear)};
    out.notes.push_back("target_modules all-linear: every linear module but the output layer, as PEFT's "
                        "shorthand selects (planner/mechanisms/all_linear.h)");
  } else {
    r.fail("target_modules", "a list of module names or \"all-linear\" (a regular expression is not read; give "
                             "--lora-targets)",
           targets);
  }
  if (targets.is_array() && (targets.empty() || !std::all_of(targets.begin(), targets.end(),
                                                             [](const json& t) { return t.is_string(); }))) {
    r.fail("target_modules", "a non-empty list of module names", targets);
  }
}

// modules_to_save train in full beside the adapters.
void read_peft_modules_to_save(ArgsReader& r, RunSettings& s) {
  if (!r.has("modules_to_save")) return;
  const json& saved = r.raw("modules_to_save");
  if (!saved.is_array()) {
    r.fail("modules_to_save", "a list of module names", saved);
  } else {
    for (const json& m : saved) {
      if (m.is_string()) s.train_patterns.push_back("*" + m.get<std::string>() + "*");
    }
  }
}

// What LoraConfig may say that is not modelled, and the keys read that change no bytes.
void refuse_unmodelled_peft(ArgsReader& r) {
  for (const char* per_module : {"rank_pattern", "layers_to_transform", "exclude_modules", "target_parameters"}) {
    if (!r.has(per_module)) continue;
    const json& v = r.raw(per_module);
    if ((v.is_object() || v.is_array()) && v.empty()) continue;
    r.fail(per_module, "empty or null (per-module ranks, layer subsets and parameter targets are not modelled)", v);
  }
  r.has("alpha_pattern");  // scales: no bytes
  if (r.has("lora_dropout") && !probability(r.raw("lora_dropout"))) {
    r.fail("lora_dropout", "a probability in [0, 1)", r.raw("lora_dropout"));
  }
  const std::string bias = r.string_or("bias", "none");
  if (bias != "none") r.fail("bias", "\"none\" (trained biases are not modelled)", json(bias));
  for (const char* read_no_bytes : {"lora_alpha", "use_rslora", "task_type", "base_model_name_or_path", "fan_in_fan_out",
                                    "init_lora_weights", "inference_mode", "revision"}) {
    r.has(read_no_bytes);
  }
}

}  // namespace

Result<ConfigImport> import_peft_config(std::string_view text, std::string_view origin, RunSettings base) {
  Result<json> parsed = graph::parse_json_text(text, origin);
  if (!parsed.is_ok()) return parsed.status();
  const json& config = parsed.value();
  if (!config.is_object())
    return Status::invalid_input(std::string(origin) +
                                 ": expected a PEFT adapter_config.json object");
  ArgsReader r(config, origin);
  ConfigImport out;
  RunSettings& s = out.settings;
  s = std::move(base);
  const std::string type = r.string_or("peft_type", "LORA");
  if (type != "LORA") r.fail("peft_type", "LORA (the only adapter modelled)", json(type));
  if (s.mode == TrainMode::kFull) s.mode = TrainMode::kLora;
  s.lora.rank = r.count_or("r", 8, kMaxLoraRank);  // LoraConfig's default r = 8
  if (r.has("lora_dropout")) {
    s.lora.dropout = probability(r.raw("lora_dropout")).value_or(0.0);  // refused below when not one
  } else {
    s.lora.dropout = 0.0;  // LoraConfig's default
  }
  if (r.has("target_modules")) read_peft_targets(r, s, out);
  read_peft_modules_to_save(r, s);
  s.lora.dora = r.boolean_or("use_dora", false);  // LoraConfig's default: plain LoRA
  refuse_unmodelled_peft(r);
  if (!r.status().is_ok()) return r.status();
  if (Status valid = validate_settings(out.settings, origin); !valid.is_ok()) return valid;
  out.ignored = r.unread();
  return out;
}

Result<ConfigImport> load_peft_config(const std::string& path, RunSettings base) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  return import_peft_config(text.value(), path, std::move(base));
}

}  // namespace headroom::planner
