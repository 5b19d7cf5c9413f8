// Reading an MMEngine (XTuner, mmpretrain) Python config through MMEngine's own loader
// (scripts/exporter/read_mmengine_config.py) in the project's Python: the config
// is code, so headroom never parses it itself. docs/config-import.md ("MMEngine configs").
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "graph/status.h"

namespace headroom::cli {

// The Python that runs the loader: $HEADROOM_PYTHON, else the checkout's .venv
// (scripts/setup_exporter.sh installs mmengine there), else python3 on PATH.
std::string mmengine_python();

// The JSON the loader prints for `config_py`, or its one-line error (naming the
// file) with a hint when mmengine is missing.
Result<nlohmann::json> read_mmengine_config(const std::string& config_py);

// What `--mmengine FILE` names, as the loader prints it: a .py config through
// the loader, any other file as that JSON already printed.
Result<nlohmann::json> read_mmengine_file(const std::string& path);

// The same for `--xtuner FILE`.
inline Result<nlohmann::json> read_xtuner_config(const std::string& path) { return read_mmengine_file(path); }

}  // namespace headroom::cli
