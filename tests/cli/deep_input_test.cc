// Issue 37, item 4: no path into a reader gets past its depth limit (64 levels,
// graph/json_text.h): a segfault there (exit 139) also killed the Python
// package's interpreter. The loader's own output is tested in
// tests/cli/mmengine_loader_bounds_test.cc.
#include <string>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;  // NOLINT(google-build-using-namespace): test helpers

std::string brackets(int levels) { return std::string(static_cast<size_t>(levels), '[') + std::string(static_cast<size_t>(levels), ']'); }

}  // namespace

TEST_CASE("--xtuner and --mmengine refuse a JSON dump of a million brackets, naming the file") {
  TempDir dir;
  const std::string deep = dir.file("deep.json");
  write_text(deep, brackets(1'000'000));
  for (const char* flag : {"--xtuner", "--mmengine"}) {
    CAPTURE(flag);
    const RunOutput run = run_headroom(std::string("fit llama-3-8b --gpu 4090 ") + flag + " " + quoted(deep));
    CHECK(run.exit_code == 2);
    CHECK_MESSAGE(contains(run.err, deep + ": JSON nested deeper than 64"), run.err);
    CHECK(run.err.size() < 1000);
  }
}

TEST_CASE("--torchtune-set with a 50,000-level key is refused, the key shown cut") {
  TempDir dir;
  const std::string config = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/torchtune/llama3_2_3B_lora_single_device.yaml";
  std::string key = "a";
  for (int level = 1; level < 50000; ++level) key += ".a";
  const RunOutput run = run_headroom("fit --gpu 4090 --seq 2048 --torchtune " + quoted(config) + " --torchtune-set " + key + "=1");
  CHECK(run.exit_code == 2);
  CHECK_MESSAGE(contains(run.err, "nests 50000 levels deep; expected at most 64"), run.err.substr(0, 500));
  CHECK(run.err.size() < 1000);
}

}  // namespace headroom
