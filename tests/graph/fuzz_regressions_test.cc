// Inputs the fuzzers once crashed on (scripts/fuzz.sh), replayed in every test
// run through the same entry points, so a fixed crash stays fixed.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph/graph_json.h"
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

TEST_CASE("fuzz regressions: graph JSON and safetensors inputs fail cleanly") {
  for (const std::string& data : inputs("fuzz_graph_json")) {
    const auto json = headroom::graph::parse_json_text(data, "fuzz.json");
    if (json.is_ok()) (void)headroom::graph::graph_from_json(json.value(), "fuzz.json");
  }
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
