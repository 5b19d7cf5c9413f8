// Families config.json names but headroom does not build are refused with the
// family's name, the reason and what to do (issue 39: Mamba's refusal listed the
// supported types and sent the user to the exporter, which stops at SDPA).
#include "models/hf_refusals.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "models/hf_import.h"

namespace headroom::models {

TEST_CASE("a state-space model_type is refused naming the family and what to do instead") {
  for (const char* type : {"mamba", "mamba2", "falcon_mamba", "rwkv"}) {
    const nlohmann::json config = {{"model_type", type}, {"hidden_size", 768}, {"num_hidden_layers", 24}};
    Result<graph::LayerGraph> graph = graph_from_hf_config(config, "m/config.json", ZooOptions{});
    REQUIRE_FALSE(graph.is_ok());
    const std::string message = graph.message();
    CHECK(message.rfind("m/config.json: model_type: ", 0) == 0);
    CHECK(message.find(std::string("got \"") + type + "\"") != std::string::npos);
    CHECK(message.find("state-space") != std::string::npos);
    CHECK(message.find("layer-graph JSON") != std::string::npos);
    CHECK(message.find("SDPA") == std::string::npos);
    CHECK(message.find("export_graph.py") == std::string::npos);  // the exporter cannot trace it
  }
  CHECK_FALSE(unsupported_family_reason("llama").has_value());
}

}  // namespace headroom::models
