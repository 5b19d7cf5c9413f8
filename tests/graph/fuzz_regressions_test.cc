// Inputs the fuzzers once crashed on (scripts/fuzz.sh), replayed in every test
// run through the same entry points, so a fixed crash stays fixed.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "graph/safetensors_header.h"

namespace {

std::vector<std::string> inputs(const std::string& target) {
  std::vector<std::string> out;
  const std::filesystem::path dir = std::filesystem::path(HEADROOM_SOURCE_DIR) / "tests/data/fuzz_regressions" / target;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    out.push_back(buffer.str());
  }
  return out;
}

}  // namespace

TEST_CASE("fuzz regressions: every corpus folder is replayed by a test") {
  // A folder scripts/fuzz.sh fills that no test replays would keep a fixed crash
  // fixed only in the fuzz job: each folder must be named here with its test.
  const std::set<std::string> replayed = {
      "fuzz_safetensors",  // this file
      "fuzz_hf_config",    // tests/models/hf_import_test.cc
      "fuzz_measurement",  // tests/reports/measurement_test.cc
      "fuzz_torchtune",    // tests/planner/fuzz_regressions_test.cc
      "fuzz_hf_trainer",   // tests/planner/fuzz_regressions_test.cc
  };
  int folders = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(HEADROOM_SOURCE_DIR) / "tests/data/fuzz_regressions")) {
    ++folders;
    CHECK_MESSAGE(replayed.count(entry.path().filename().string()) == 1, entry.path().filename().string());
  }
  CHECK(folders == static_cast<int>(replayed.size()));
}

TEST_CASE("fuzz regressions: safetensors inputs fail cleanly") {
  const auto safetensors = inputs("fuzz_safetensors");
  CHECK_FALSE(safetensors.empty());
  for (const std::string& data : safetensors) {
    REQUIRE(data.size() >= 2);
    const int64_t tail = static_cast<int64_t>(static_cast<unsigned char>(data[0])) << (static_cast<unsigned char>(data[1]) % 40);
    const std::string_view prefix(data.data() + 2, data.size() - 2);
    const auto parsed = headroom::graph::parse_safetensors_header(prefix, static_cast<int64_t>(prefix.size()) + tail, "fuzz.safetensors");
    CHECK_FALSE(parsed.is_ok());
    CHECK(parsed.message().find("fuzz.safetensors") != std::string::npos);
  }
}
