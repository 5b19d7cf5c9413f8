// Reading an MMEngine (XTuner, mmpretrain) Python config through MMEngine's own
// loader (scripts/exporter/read_mmengine_config.py, compiled into headroom and run
// with `python -c`). The config is Python code and runs with the user's
// privileges; headroom never parses it itself. It runs once per config and
// process (the result is kept), in its own process group under limits
// (docs/config-import.md, "MMEngine configs"):
//   HEADROOM_CONFIG_TIMEOUT_S   wall clock, default 60 s;
//   HEADROOM_CONFIG_MEMORY_MIB  address space (RLIMIT_AS), default 8192 MiB;
//   the .py at most 1 MiB, the loader's output at most 16 MiB.
// Children it leaves running are killed with it, in its group or (in the
// `headroom` command) out of it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "graph/status.h"

namespace headroom::cli {

// The JSON the loader prints for `config_py`, or one error naming the file: a
// config MMEngine refused, ran too long, used too much memory or printed too
// much (invalid input), or no Python with mmengine here (unsupported).
Result<nlohmann::json> read_mmengine_config(const std::string& config_py);

// What `--mmengine FILE` names, as the loader prints it: a .py config through
// the loader, any other file as that JSON already printed.
Result<nlohmann::json> read_mmengine_file(const std::string& path);

// The same for `--xtuner FILE`.
inline Result<nlohmann::json> read_xtuner_config(const std::string& path) { return read_mmengine_file(path); }

// Called once by the `headroom` command: a config's children that left the
// loader's process group (setsid) are ended with it too, headroom being their
// subreaper (cli/bounded_child.h). Not in the Python package, whose process is
// the user's and has children of its own.
void end_escaped_config_children();

// Forgets the configs read so far, so the next read runs them again (the
// Python package calls it per call: a config may change between them).
void forget_mmengine_configs();

}  // namespace headroom::cli
