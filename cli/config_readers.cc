#include "cli/config_readers.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "cli/mmengine_loader.h"
#include "planner/configs/accelerate_import.h"
#include "planner/configs/axolotl_import.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/configs/peft_import.h"
#include "planner/configs/llamafactory_import.h"
#include "planner/configs/mmengine_import.h"
#include "planner/configs/torchtune_import.h"
#include "planner/configs/xtuner_import.h"

namespace headroom::cli {
namespace {

using planner::ConfigImport;
using planner::RunSettings;

// What a reader gets: its file, the run so far, and the rest of the command line.
struct ReaderInput {
  const char* flag;
  const std::string& file;
  const RunSettings& base;
  const std::string& model;
  const SettingsFlags& flags;
};

// What a reader gives: the import and the label its notes carry.
struct ReaderOutput {
  ConfigImport imported;
  std::string what;
  bool xtuner = false;
};

Result<ReaderOutput> labelled(Result<ConfigImport> imported, const char* flag, std::string what) {
  if (!imported.is_ok()) return imported.status().with_prefix(std::string(flag) + ": ");
  return ReaderOutput{std::move(imported.value()), std::move(what)};
}

// The loader's "files_read": the _base_ files and whatever else the config's code
// read while MMEngine loaded it (absolute paths; anything else in the list is skipped).
void add_files_read(const nlohmann::json& dump, ConfigImport& imported) {
  const auto found = dump.find("files_read");
  if (found == dump.end() || !found->is_array()) return;
  for (const nlohmann::json& path : *found) {
    if (path.is_string()) imported.files_read.push_back({"read while it loaded", path.get<std::string>()});
  }
}

// An MMEngine config (--xtuner, or --mmengine with an XTuner or mmpretrain
// model), dumped by MMEngine's loader; with --deepspeed its batch and
// accumulation win over the file's (xtuner/tools/train.py).
Result<ReaderOutput> read_mmengine(const ReaderInput& in) {
  const bool as_xtuner = std::string(in.flag) == "--xtuner";
  Result<nlohmann::json> dump = read_mmengine_file(in.file);
  if (!dump.is_ok()) return dump.status().with_prefix(std::string(in.flag) + ": ");
  Result<planner::MmengineKind> kind = as_xtuner ? Result<planner::MmengineKind>(planner::MmengineKind::kXtuner)
                                                 : planner::mmengine_kind(dump.value(), in.file);
  if (!kind.is_ok()) return kind.status().with_prefix(std::string(in.flag) + ": ");
  const bool is_xtuner = kind.value() == planner::MmengineKind::kXtuner;
  if (is_xtuner && in.model.empty() && in.flags.settings_file.empty() && in.flags.settings_text.empty()) {
    return Status::invalid_input("MODEL: missing (an XTuner config names checkpoints, which headroom does not load; "
                                 "expected MODEL as that LLM: a zoo name, its config.json or a layer graph)");
  }
  const bool with_deepspeed = flag_given(in.flags, "--deepspeed");
  Result<ReaderOutput> out =
      is_xtuner ? labelled(planner::import_xtuner_config(dump.value(), in.file, in.base, with_deepspeed), in.flag,
                           "XTuner config")
                : labelled(planner::import_mmengine_config(dump.value(), in.file, in.base, with_deepspeed), in.flag,
                           "mmpretrain config");
  if (!out.is_ok()) return out;
  out.value().xtuner = is_xtuner;
  add_files_read(dump.value(), out.value().imported);
  if (in.file.ends_with(".py")) {
    out.value().imported.notes.insert(out.value().imported.notes.begin(),
                                      in.file + " was run as Python code, with your privileges, by MMEngine's loader");
  }
  return out;
}

constexpr const char* kMmengineRefusal =
    "FLAG: an MMEngine config holds the model and optimizer itself; expected FLAG without --hf-args, --torchtune, "
    "--axolotl, --llamafactory, --accelerate, --peft or another MMEngine config";

struct ConfigReader {
  const char* flag;
  std::vector<const char*> excludes;  // config flags it cannot be combined with
  const char* refusal;                // the message then ("FLAG" stands for the flag)
  Result<ReaderOutput> (*read)(const ReaderInput& in);
};

// In the order the files are read. Sources of each reader: docs/config-import.md.
const std::vector<ConfigReader>& config_readers() {
  static const std::vector<ConfigReader> rows = {
      {"--torchtune", {"--hf-args", "--peft", "--accelerate"},
       "--torchtune: a torchtune run has no TrainingArguments, PEFT or Accelerate config; expected --torchtune "
       "alone, or --hf-args / --peft / --accelerate without it",
       [](const ReaderInput& in) {
         return labelled(planner::load_torchtune_config(in.file, given_values(in.flags, "--torchtune-set"), in.base),
                         in.flag, "torchtune config");
       }},
      {"--accelerate", {}, nullptr,
       [](const ReaderInput& in) {
         return labelled(planner::load_accelerate_config(in.file, in.base), in.flag, "Accelerate config");
       }},
      {"--axolotl", {"--hf-args", "--torchtune"},
       "--axolotl: axolotl builds the Trainer's arguments itself; expected --axolotl without --hf-args or --torchtune",
       [](const ReaderInput& in) {
         return labelled(planner::load_axolotl_config(in.file, in.base), in.flag, "axolotl config");
       }},
      {"--llamafactory", {"--hf-args", "--torchtune", "--axolotl"},
       "--llamafactory: LLaMA-Factory's config holds the Trainer's arguments itself; expected --llamafactory without "
       "--hf-args, --axolotl or --torchtune",
       [](const ReaderInput& in) {
         return labelled(planner::load_llamafactory_config(in.file, in.base), in.flag, "LLaMA-Factory config");
       }},
      {"--xtuner",
       {"--hf-args", "--torchtune", "--axolotl", "--llamafactory", "--accelerate", "--peft", "--mmengine"},
       kMmengineRefusal, read_mmengine},
      {"--mmengine",
       {"--hf-args", "--torchtune", "--axolotl", "--llamafactory", "--accelerate", "--peft", "--xtuner"},
       kMmengineRefusal, read_mmengine},
      {"--hf-args", {}, nullptr,
       [](const ReaderInput& in) {
         return labelled(planner::load_training_arguments(in.file, in.base), in.flag, "TrainingArguments");
       }},
      {"--peft", {}, nullptr,
       [](const ReaderInput& in) {
         return labelled(planner::load_peft_config(in.file, in.base), in.flag, "PEFT config");
       }},
  };
  return rows;
}

// The row's refusal with its flag in place of FLAG.
std::string refusal_text(const ConfigReader& row) {
  std::string text = row.refusal;
  for (size_t at = text.find("FLAG"); at != std::string::npos; at = text.find("FLAG")) text.replace(at, 4, row.flag);
  return text;
}

// The last file given for `flag` (a repeated flag keeps its last value), or nullopt.
std::optional<std::string> file_of(const SettingsFlags& flags, const char* flag) {
  const std::vector<std::string> files = given_values(flags, flag);
  if (files.empty()) return std::nullopt;
  return files.back();
}

void add_notes(const ReaderOutput& out, std::vector<std::string>& notes) {
  for (const std::string& note : out.imported.notes) notes.push_back(out.what + ": " + note);
  if (out.imported.ignored.empty()) return;
  std::string keys;
  for (const std::string& key : out.imported.ignored) keys += (keys.empty() ? "" : ", ") + key;
  notes.push_back(out.what + ": keys not read (no effect on memory or time that headroom models): " + keys);
}

}  // namespace

Status check_config_combinations(const SettingsFlags& flags) {
  if (flag_given(flags, "--torchtune-set") && !flag_given(flags, "--torchtune")) {
    return Status::invalid_input("--torchtune-set: overrides a torchtune config; expected --torchtune FILE with it");
  }
  for (const ConfigReader& row : config_readers()) {
    if (!flag_given(flags, row.flag)) continue;
    for (const char* excluded : row.excludes) {
      if (flag_given(flags, excluded)) return Status::invalid_input(refusal_text(row));
    }
  }
  return Status::ok();
}

Result<ConfigFilesRead> read_config_files(const std::string& model, const SettingsFlags& flags,
                                          RunSettings& settings, std::vector<std::string>* notes) {
  ConfigFilesRead read;
  for (const ConfigReader& row : config_readers()) {
    const std::optional<std::string> file = file_of(flags, row.flag);
    if (!file) continue;
    Result<ReaderOutput> out = row.read(ReaderInput{row.flag, *file, settings, model, flags});
    if (!out.is_ok()) return out.status();
    const ConfigImport& imported = out->imported;
    settings = imported.settings;
    read.shard_when_distributed = read.shard_when_distributed || imported.shard_when_distributed;
    read.shard_within_node = read.shard_within_node || imported.shard_within_node;
    if (imported.sequence_unknown && !read.sequence_unknown) {
      read.sequence_unknown = true;
      read.sequence_source = std::string(row.flag) + ": " + *file;
    }
    for (const planner::FileRead& named : imported.files_read) {
      read.files_read.push_back({std::string(row.flag) + " " + *file + ": " + named.key, named.path});
    }
    if (out->xtuner) read.xtuner = imported;
    if (notes != nullptr) add_notes(out.value(), *notes);
  }
  return read;
}

}  // namespace headroom::cli
