// The exit statuses of `headroom` and `headroom-train` (docs/cli.md "Errors and
// exit status"), and the one function that turns an error's kind into one.
// Commands pass the Status they got; no call site picks a number.
#pragma once

#include "graph/status.h"

namespace headroom::cli {

inline constexpr int kExitOk = 0;  // answered (fits or not), listed, trained
inline constexpr int kExitFailure =
    1;  // headroom cannot do it, or it failed: unsupported, i/o, runtime, internal
inline constexpr int kExitUsage =
    2;  // the user's input is wrong: command line, settings, an input file

// kInvalidInput -> kExitUsage; kUnsupported, kIo, kRuntime, kInternal -> kExitFailure;
// kOk -> kExitOk.
int exit_status(StatusCode code);
inline int exit_status(const Status& status) { return exit_status(status.code()); }

}  // namespace headroom::cli
