// The releases a `pip freeze` (or `pip list --format=freeze`, `uv pip freeze`)
// names, for the packages whose release changes the price (settings/versions.h).
#pragma once

#include <string>

#include "graph/status.h"
#include "planner/settings/versions.h"

namespace headroom::planner {

// Reads "name==release" lines of `path` into `out`, for the packages
// find_versioned_package knows; other packages, comments, options ("-e",
// "--index-url") and direct references ("name @ URL", which carry no release)
// are skipped. A line for a known package whose release is not one is an error
// naming the file, the line and what was expected; so is a file with no
// "name==release" line at all (not a freeze).
Status read_pip_freeze(const std::string& path, PackageVersions& out);

}  // namespace headroom::planner
