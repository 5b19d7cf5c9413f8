// The flags of `headroom run` (steps, data, checkpoints, resume, outputs), shared
// by the planner binary (which parses them for --help and usage errors before it
// starts the trainer) and by headroom-train (which parses them again to train).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace headroom::cli {

void add_run_flags(CLI::App& command, CliOptions& options);

}  // namespace headroom::cli
