// Never write over an input: every file a command writes (-o, --emit KIND=FILE,
// run's --metrics ...) is compared with every file it reads (MODEL, --settings,
// the config flags, PLAN, and the files those configs name: a `deepspeed:` key)
// by device and inode, so links, hard links and other spellings of one file are
// caught. Checked before anything is written: the command line's files before
// the configs are read, the files they name once they have been read.
#pragma once

#include <string>
#include <vector>

#include "cli/named_file.h"
#include "cli/settings_flags.h"
#include "graph/status.h"

namespace headroom::cli {

struct CliOptions;  // cli/commands.h

// The files the settings read: MODEL (when it is a file), --settings and every
// settings flag that takes a FILE (--torchtune, --hf-args, --deepspeed, ...).
std::vector<NamedFile> settings_input_files(const std::string& model, const SettingsFlags& flags);

// Invalid input naming both flags when an output is the same file as an input;
// outputs that do not exist yet, and ones that are not regular files (a FIFO,
// /dev/null), are fine.
Status refuse_outputs_over_inputs(const std::vector<NamedFile>& outputs, const std::vector<NamedFile>& inputs);

// The command line's outputs (-o, --emit KIND=FILE, run's --metrics,
// --measurement-out, --write-calibration) against its inputs (the settings'
// files, PLAN, --measurement, run's --data).
Status refuse_outputs_over_inputs(const CliOptions& options);

// The command line's outputs against the files its configs named
// (Answered::files_read, cli/answers.h), once they have been read.
Status refuse_outputs_over_config_files(const CliOptions& options, const std::vector<NamedFile>& files_read);

}  // namespace headroom::cli
