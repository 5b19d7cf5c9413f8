// Running the `headroom` binary from the CLI tests: capture stdout, stderr and
// the exit status as a user (or a script) sees them, in scratch directories.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace headroom::cli_harness {

namespace fs = std::filesystem;

struct RunOutput {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// A fresh directory per use, removed at the end (tests/support/temp_dir.h).
using headroom::testing::TempDir;

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Runs `headroom ARGS` (ARGS as a shell would split them; quote paths), with
// `environment` ("NAME=value ...", shell-quoted) set for that process only, in
// `directory` when one is given (relative paths are then relative to it).
inline RunOutput run_headroom(const std::string& args, const std::string& environment = "",
                              const std::string& directory = "") {
  TempDir dir;
  const std::string err_path = dir.file("stderr.txt");
  const std::string command = (directory.empty() ? "" : "cd '" + directory + "' && ") +
                              (environment.empty() ? "" : "env " + environment + " ") + "'" + HEADROOM_BINARY +
                              "' " + args + " 2>'" + err_path + "'";
  RunOutput result;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = read_text(err_path);
  return result;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline nlohmann::json parse_json(const std::string& text) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  CHECK_FALSE(json.is_discarded());
  return json;
}

inline std::string quoted(const std::string& path) { return "'" + path + "'"; }

// Checks each memory category a `run --json` measured apart (the peak excepted:
// indicative on a CPU) is within `tolerance` of its prediction; returns how many.
inline int check_categories_within(const nlohmann::json& run, double tolerance) {
  int compared = 0;
  for (const nlohmann::json& category : run["categories"]) {
    const std::string name = category["category"];
    if (name.find("peak") != std::string::npos) continue;
    CAPTURE(category.dump());
    const double predicted = category["predicted_bytes"].get<double>();
    const double measured = category["measured_bytes"].get<double>();
    REQUIRE(measured > 0);
    CHECK(std::abs(predicted - measured) / measured <= tolerance);
    ++compared;
  }
  return compared;
}

// True, with a MESSAGE, when `run` is this binary's refusal to train because it
// was built without LibTorch (no headroom-train); the caller then skips. In a
// build that has the trainer, that refusal is a failure, never a skip; any other
// failure is left to the caller's checks, so a broken executor never passes.
inline bool built_without_libtorch(const RunOutput& run) {
  if (run.exit_code != 1 || !contains(run.err, "built without LibTorch")) return false;
#ifdef HEADROOM_TRAINER_BUILT
  FAIL("headroom-train was built, but `headroom run` did not find it: " << run.err);
#endif
  MESSAGE("skipped: this headroom was built without LibTorch, so `headroom run` cannot train");
  return true;
}

}  // namespace headroom::cli_harness
