#include "planner/mechanisms/name_globs.h"

#include <fnmatch.h>

#include <algorithm>

namespace headroom::planner {

bool name_matches(std::string_view pattern, std::string_view name) {
  return fnmatch(std::string(pattern).c_str(), std::string(name).c_str(), 0) == 0;
}

bool any_name_matches(const std::vector<std::string>& patterns, std::string_view name) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& pattern) { return name_matches(pattern, name); });
}

}  // namespace headroom::planner
