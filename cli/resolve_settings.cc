#include "cli/resolve_settings.h"

#include <nlohmann/json.hpp>
#include <set>

#include "cli/config_readers.h"
#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"

namespace headroom::cli {
namespace {

using planner::RunSettings;

// A settings file is a few kB; anything far larger is not one.
constexpr int64_t kMaxSettingsFileBytes = int64_t{16} << 20;

// Flags that set the same field must agree: --mode full --lora is a mistake.
Status check_conflicts(const SettingsFlags& flags) {
  const std::vector<std::set<std::string>> groups = {{"--mode", "--lora", "--qlora"},
                                                     {"--checkpointing", "--checkpoint-blocks"},
                                                     {"--gpu", "--gpu-file"}};
  for (const auto& group : groups) {
    std::string first_flag;
    std::string first_value;
    for (const auto& [flag, value] : flags.given) {
      const std::string name = primary_name(*flag);
      if (!group.count(name)) continue;
      const std::string seen = name == "--lora" ? "lora" : name == "--qlora" ? "qlora" : value;
      if (first_flag.empty()) {
        first_flag = name;
        first_value = seen;
      } else if (name != first_flag || seen != first_value) {
        return Status::invalid_input(name + ": conflicts with " + first_flag +
                                     (first_value.empty() ? "" : " " + first_value) +
                                     " (expected one of them)");
      }
    }
  }
  return Status::ok();
}

Result<RunSettings> parse_settings_text(const std::string& text, const std::string& origin) {
  // The shared parse: depth limit, duplicate keys refused (not last-wins), numbers a double holds.
  Result<nlohmann::json> json = graph::parse_json_text(text, origin);
  if (!json.is_ok()) {
    return json.status()
        .with_prefix("--settings: ")
        .with_suffix(" (expected a RunSettings object, see docs/cli-json.md)");
  }
  return planner::settings_from_json(json.value(), origin);
}

Result<RunSettings> load_settings_file(const std::string& path) {
  Result<std::string> text = graph::read_file(path, kMaxSettingsFileBytes);
  if (!text.is_ok()) return text.status().with_prefix("--settings: ");
  return parse_settings_text(text.value(), path);
}

// The base the config files and flags refine: the --settings file or text, else
// defaults (then MODEL, or a config that names the model, must say which).
Result<RunSettings> base_settings(const std::string& model, const SettingsFlags& flags) {
  if (!flags.settings_file.empty()) return load_settings_file(flags.settings_file);
  if (!flags.settings_text.empty()) return parse_settings_text(flags.settings_text, flags.settings_origin);
  if (model.empty() && !flag_given(flags, "--torchtune") && !flag_given(flags, "--mmengine")) {
    return Status::invalid_input(
        "MODEL: missing (expected a zoo name such as llama-3-8b, see `headroom "
        "models`, a layer-graph JSON file, or --torchtune / --mmengine with a config that names it)");
  }
  return RunSettings{};
}

// Every flag, in table order, those applied last (--deepspeed) after the others.
Status apply_flags(const SettingsFlags& flags, RunSettings& settings) {
  if (Status conflicts = check_conflicts(flags); !conflicts.is_ok()) return conflicts;
  for (bool last : {false, true}) {
    for (const auto& [flag, value] : flags.given) {
      if (flag->apply_last != last) continue;
      Status status = apply_flag(*flag, settings, value);
      if (!status.is_ok()) return status.with_prefix(primary_name(*flag) + ": ");
    }
  }
  return Status::ok();
}

// What the files left to the GPU count and sequence length, now that the flags have given them.
Status complete_from_files(const ConfigFilesRead& read, const SettingsFlags& flags, RunSettings& settings,
                           std::vector<std::string>* notes) {
  // xtuner train gives DeepSpeed MMEngine's batch and accumulation, whatever the
  // DeepSpeed file says (xtuner/tools/train.py); the flags still win.
  if (read.xtuner && flag_given(flags, "--deepspeed")) {
    if (!flag_given(flags, "--batch")) settings.micro_batch = read.xtuner->settings.micro_batch;
    if (!flag_given(flags, "--grad-accum")) settings.grad_accum = read.xtuner->settings.grad_accum;
  }
  if (read.shard_when_distributed && settings.world_size() > 1 && settings.zero_stage == 0 &&
      !flag_given(flags, "--zero")) {
    settings.zero_stage = 3;
    if (notes != nullptr) {
      notes->push_back("torchtune config: more than one GPU runs a distributed recipe, which shards with FSDP2 (ZeRO-3)");
    }
  }
  if (read.shard_within_node && settings.nodes > 1 && !flag_given(flags, "--shard-gpus")) {
    settings.shard_gpus = settings.gpus_per_node;
  }
  if (read.sequence_unknown && settings.seq_len == 0 && settings.resolution == 0) {
    return Status::invalid_input(
        read.sequence_source +
        ": the sequence length is not in the file (a null tokenizer.max_seq_len without packing, "
        "or TrainingArguments without SFTConfig's max_length): batches are as long as their "
        "longest sample; expected --seq N (the longest batch the run will see)");
  }
  return Status::ok();
}

}  // namespace

Result<RunSettings> resolve_settings(const std::string& model, const SettingsFlags& flags,
                                     std::vector<std::string>* notes, std::vector<NamedFile>* files_read) {
  if (Status combinations = check_config_combinations(flags); !combinations.is_ok()) return combinations;
  Result<RunSettings> settings = base_settings(model, flags);
  if (!settings.is_ok()) return settings.status();
  Result<ConfigFilesRead> read = read_config_files(model, flags, settings.value(), notes);
  if (!read.is_ok()) return read.status();
  if (files_read != nullptr) *files_read = read->files_read;
  if (!model.empty()) settings->model = model;
  if (Status applied = apply_flags(flags, settings.value()); !applied.is_ok()) return applied;
  if (Status completed = complete_from_files(read.value(), flags, settings.value(), notes); !completed.is_ok()) {
    return completed;
  }
  if (Status valid = planner::validate_settings(settings.value(), "command line"); !valid.is_ok()) return valid;
  return settings;
}

}  // namespace headroom::cli
