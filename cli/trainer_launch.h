// `headroom run`: the planner binary never loads LibTorch, so it hands the run to
// the trainer executable, headroom-train, by exec (same process id, terminal,
// signals and exit status). The trainer is found next to this binary, or at
// $HEADROOM_TRAINER. A build without LibTorch has no trainer; `run` then says so.
#pragma once

#include <string>

#include "cli/commands.h"

namespace headroom::cli {

inline constexpr const char* kTrainerName = "headroom-train";

// The trainer's path: $HEADROOM_TRAINER when set, else headroom-train in the
// directory of the running executable. Empty when neither can be found.
std::string trainer_path();

// Replaces this process with the trainer, passing options.arguments on. Returns
// only on failure (no trainer in this build, exec failed), with an exit status.
int launch_trainer(const CliOptions& options, Terminal& terminal);

}  // namespace headroom::cli
