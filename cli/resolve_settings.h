// RunSettings from the command line: --settings FILE (or the Python package's
// settings text), the config files of other tools (cli/config_readers.h), the
// MODEL argument and the flags, in that order of precedence (flags win), then
// what the files left for the GPU count and sequence length, and validation.
#pragma once

#include <string>
#include <vector>

#include "cli/named_file.h"
#include "cli/settings_flags.h"
#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace headroom::cli {

// RunSettings for `model` (empty: the --settings file's model, or the --torchtune
// config's) from the flags. A --torchtune config is read first, with its
// --torchtune-set overrides; MODEL and the other flags then override it. What an
// imported config left to assumption, or ignored, goes to `notes`.
// Errors name the flag or the file, the field and what was expected. The files
// the configs named and their readers opened (a `deepspeed:` key's) go to
// `files_read` (may be null), for the output guard (cli/output_guard.h).
Result<planner::RunSettings> resolve_settings(const std::string& model, const SettingsFlags& flags,
                                              std::vector<std::string>* notes = nullptr,
                                              std::vector<NamedFile>* files_read = nullptr);

}  // namespace headroom::cli
