#include "planner/configs/pip_freeze.h"

#include <algorithm>
#include <string_view>

#include "graph/atomic_file.h"
#include "planner/configs/config_import.h"

namespace headroom::planner {

Status read_pip_freeze(const std::string& path, PackageVersions& out) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  std::string_view rest = text.value();
  int line_number = 0;
  int pinned_lines = 0;
  while (!rest.empty()) {
    const size_t newline = rest.find('\n');
    const std::string_view line = trimmed(rest.substr(0, std::min(rest.find('#'), newline)));
    rest.remove_prefix(newline == std::string_view::npos ? rest.size() : newline + 1);
    ++line_number;
    const size_t pin = line.find("==");
    if (line.empty() || line.front() == '-' || pin == std::string_view::npos) continue;
    ++pinned_lines;
    const std::string name = normalized_package_name(trimmed(line.substr(0, pin)));
    // Extras ("name[extra]==1.0") and markers ("; python_version...") name the same release.
    const std::string base = name.substr(0, name.find('['));
    const std::string_view release = trimmed(line.substr(pin + 2).substr(0, line.substr(pin + 2).find(';')));
    if (find_versioned_package(base) == nullptr) continue;
    if (!parse_release(release)) {
      return Status::invalid_input(path + ": line " + std::to_string(line_number) + ": " + base +
                                   ": expected a release such as 4.44.2, got '" + std::string(release) + "'");
    }
    out[base] = std::string(release);
  }
  if (pinned_lines == 0) {
    return Status::invalid_input(path + ": expected the output of pip freeze (lines NAME==RELEASE), found none");
  }
  return Status::ok();
}

}  // namespace headroom::planner
