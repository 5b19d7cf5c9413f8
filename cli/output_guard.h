// Never write over an input: every file a command writes (-o, --emit KIND=FILE,
// run's --metrics ...) is compared with every file it reads (MODEL, --settings,
// the config flags, PLAN) by device and inode, so links, hard links and other
// spellings of one file are caught. Checked before anything is written.
#pragma once

#include <string>
#include <vector>

#include "cli/settings_flags.h"
#include "graph/status.h"

namespace headroom::cli {

struct CliOptions;  // cli/commands.h

// A file named on the command line, with the flag that named it ("--torchtune",
// "-o", "--emit torchtune", "MODEL").
struct NamedFile {
  std::string flag;
  std::string path;
};

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

}  // namespace headroom::cli
