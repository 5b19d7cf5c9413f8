// Adapters of their own rank in one part of the model (RunSettings::scoped_lora):
// XTuner's LLaVA trains llm_lora on the language model and visual_encoder_lora on
// the CLIP tower, with different ranks.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "models/zoo.h"
#include "planner/settings/run_settings.h"
#include "planner/mechanisms/trainability.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

int64_t adapter_elements(const graph::LayerGraph& graph, std::string_view scope) {
  int64_t total = 0;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (is_lora_adapter(param) && name_matches(scope, node.name)) total += param.elements();
    }
  }
  return total;
}

RunSettings llava_lora() {
  RunSettings s;
  s.model = "llava-llama-3-8b";
  s.mode = TrainMode::kQlora;
  s.lora.rank = 512;
  s.lora.dropout = 0.05;
  return s;
}

}  // namespace

TEST_CASE("a scoped adapter gives the LLaVA vision tower its own rank on every linear there") {
  Result<graph::LayerGraph> base = models::build_zoo_model("llava-llama-3-8b", {});
  REQUIRE_MESSAGE(base.is_ok(), base.message());
  RunSettings s = llava_lora();
  Result<graph::LayerGraph> llm_only = apply_training_mode(base.value(), s);
  REQUIRE_MESSAGE(llm_only.is_ok(), llm_only.message());
  CHECK(adapter_elements(llm_only.value(), "*vision_tower*") == 0);

  s.scoped_lora.push_back({"*vision_tower*", LoraSettings{64, {}, 0.05}});
  Result<graph::LayerGraph> both = apply_training_mode(base.value(), s);
  REQUIRE_MESSAGE(both.is_ok(), both.message());
  // 23 CLIP layers run as nodes (hidden_states[-2]): q, k, v, out_proj (1024 x 1024)
  // and fc1, fc2 (1024 x 4096), r = 64: 64 x (4 x 2048 + 2 x 5120) = 1,179,648 each.
  CHECK(adapter_elements(both.value(), "*vision_tower*") == 23 * 1'179'648);
  // The language model's adapters are the same with or without the scoped ones.
  CHECK(adapter_elements(both.value(), "language_model*") == adapter_elements(llm_only.value(), "language_model*"));
  CHECK(adapter_elements(both.value(), "language_model*") == 32LL * 512 * (4096 * 2 + 5120 * 2 + 4096 * 2 + 18432 * 3));

  // Targets narrow the scope: q_proj and v_proj of the tower only.
  s.scoped_lora[0].lora.targets = {"q_proj", "v_proj"};
  Result<graph::LayerGraph> narrowed = apply_training_mode(base.value(), s);
  REQUIRE(narrowed.is_ok());
  CHECK(adapter_elements(narrowed.value(), "*vision_tower*") == 23LL * 2 * 64 * 2048);
}

TEST_CASE("a scope that matches no linear is an error naming it, and scoped adapters round-trip the settings JSON") {
  Result<graph::LayerGraph> base = models::build_zoo_model("llava-llama-3-8b", {});
  REQUIRE(base.is_ok());
  RunSettings s = llava_lora();
  s.scoped_lora.push_back({"*no_such_tower*", LoraSettings{64, {}, 0.0}});
  Result<graph::LayerGraph> refused = apply_training_mode(base.value(), s);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("scoped_lora[0]") != std::string::npos);
  CHECK(refused.message().find("*no_such_tower*") != std::string::npos);

  s.scoped_lora[0] = {"*vision_tower*", LoraSettings{64, {"fc1"}, 0.05}};
  const Result<RunSettings> back = settings_from_json(settings_to_json(s), "t.json");
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  REQUIRE(back->scoped_lora.size() == 1);
  CHECK(back->scoped_lora[0].scope == "*vision_tower*");
  CHECK(back->scoped_lora[0].lora.rank == 64);
  CHECK(back->scoped_lora[0].lora.targets == std::vector<std::string>{"fc1"});
  CHECK(back->scoped_lora[0].lora.dropout == doctest::Approx(0.05));

  s.scoped_lora[0].lora.rank = 0;
  CHECK(validate_settings(s, "t.json").message().find("scoped_lora[0].rank") != std::string::npos);
  s.scoped_lora[0].lora.rank = 8;
  s.mode = TrainMode::kFull;
  CHECK(validate_settings(s, "t.json").message().find("scoped_lora[0]") != std::string::npos);
}

}  // namespace headroom::planner
