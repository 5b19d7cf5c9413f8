// The --FORMAT FILE flags that read another tool's config into RunSettings
// (--torchtune, --accelerate, --axolotl, --llamafactory, --xtuner, --mmengine,
// --hf-args, --peft): one row each in a table (cli/config_readers.cc) with its
// reader, the flags it cannot be combined with, and the label of its notes.
// The files are the base the other flags refine, read in the table's order;
// each keeps what the ones before it set and it does not say.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/named_file.h"
#include "cli/settings_flags.h"
#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::cli {

// What the config files left for after the flags: facts that need the GPU count
// or the sequence length the flags give, and XTuner's batch for --deepspeed.
struct ConfigFilesRead {
  bool sequence_unknown = false;
  std::string sequence_source;  // "--hf-args: FILE", the first file that left it open
  bool shard_when_distributed = false;
  bool shard_within_node = false;
  std::optional<planner::ConfigImport> xtuner;  // an XTuner config, as read
  // Files the configs named and their readers opened ("--axolotl a.yml: deepspeed").
  std::vector<NamedFile> files_read;
};

// Refuses combinations of config flags that describe two runs (a torchtune
// recipe with TrainingArguments, two MMEngine configs, ...) and
// --torchtune-set without --torchtune, before any file is read.
Status check_config_combinations(const SettingsFlags& flags);

// Reads every config file the flags name, in the table's order, into
// `settings`; each reader's notes and ignored keys go to `notes` (may be null).
// `model` is the MODEL argument (an XTuner config needs it). Errors name the flag.
Result<ConfigFilesRead> read_config_files(const std::string& model, const SettingsFlags& flags,
                                          planner::RunSettings& settings, std::vector<std::string>* notes);

}  // namespace headroom::cli
