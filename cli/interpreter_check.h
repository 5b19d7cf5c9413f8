// Which Python runs an MMEngine config, and whether it is safe to run: it must
// not be replaceable by another user (issue 37: an interpreter found at a path
// someone else can create or write runs their code as every user of --xtuner).
#pragma once

#include <string>

#include "graph/status.h"

namespace headroom::cli {

// The Python that runs the MMEngine loader: $HEADROOM_PYTHON; else a .venv
// (scripts/setup_exporter.sh installs mmengine there) in the directory of the
// running program or one of its three parents (a checkout's build/cli/headroom,
// a virtual environment's bin/headroom, the Python package's interpreter); else
// python3 on PATH. Returned as a path (PATH searched).
std::string mmengine_python();

// Ok when neither `path` (as given, and through its links) nor the directory
// holding it can be written by another user: owned by this user or root, not
// writable by others, and by the group only when it is this user's own group.
// Invalid input naming the path and what is wrong otherwise.
Status check_not_writable_by_others(const std::string& path);

}  // namespace headroom::cli
