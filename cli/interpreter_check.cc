#include "cli/interpreter_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <vector>

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

// How many parents of the program's directory are searched for a .venv.
constexpr int kVenvSearchParents = 3;

std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return name;
}

// What is wrong with one file system entry (lstat: a link itself), or "".
std::string unsafe_entry(const fs::path& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return "";
  if (info.st_uid != getuid() && info.st_uid != 0) return "owned by another user (uid " + std::to_string(info.st_uid) + ")";
  if (S_ISLNK(info.st_mode)) return "";  // a link's own mode means nothing
  const bool sticky_dir = S_ISDIR(info.st_mode) && (info.st_mode & S_ISVTX) != 0;
  if ((info.st_mode & S_IWOTH) != 0 && !sticky_dir) return "writable by every user";
  if ((info.st_mode & S_IWGRP) != 0 && info.st_gid != getgid() && !sticky_dir) return "writable by its group";
  return "";
}

}  // namespace

std::string mmengine_python() {
  if (const char* python = std::getenv("HEADROOM_PYTHON"); python != nullptr && *python != '\0') {
    return std::string_view(python).find('/') == std::string_view::npos ? on_path(python) : python;
  }
  std::error_code error;
  fs::path dir = fs::read_symlink("/proc/self/exe", error).parent_path();
  for (int up = 0; !error && up <= kVenvSearchParents && !dir.empty(); ++up, dir = dir.parent_path()) {
    const fs::path venv = dir / ".venv" / "bin" / "python";
    if (fs::exists(venv, error)) return venv.string();
    if (dir == dir.root_path()) break;
  }
  return on_path("python3");
}

Status check_not_writable_by_others(const std::string& path) {
  std::error_code error;
  const fs::path resolved = fs::canonical(path, error);
  std::vector<fs::path> entries = {path, fs::absolute(path, error).parent_path()};
  if (!resolved.empty()) {
    entries.push_back(resolved);
    entries.push_back(resolved.parent_path());
  }
  for (const fs::path& entry : entries) {
    if (const std::string why = unsafe_entry(entry); !why.empty()) {
      return Status::invalid_input(path + ": refused to run it, " + entry.string() + " is " + why +
                                   " (another user could change what runs); expected it owned by you or root and "
                                   "writable by no one else");
    }
  }
  return Status::ok();
}

}  // namespace headroom::cli
