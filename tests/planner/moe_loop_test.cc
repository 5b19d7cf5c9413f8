// Mixture-of-experts models under transformers 4.x (models/moe_loop.h): the
// release picks the layout, QLoRA quantizes the expert Linears and the router,
// LoRA on them is plain LoRA, and the families without a 4.x layout are refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <utility>
#include <string>

#include "models/hf_import.h"
#include "planner/mechanisms/trainability.h"
#include "planner/predict/moe_notes.h"
#include "planner/predict/planner.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";

graph::LayerGraph load(const std::string& name, bool expert_modules) {
  models::ZooOptions options;
  options.expert_modules = expert_modules;
  Result<models::HfModel> model = models::load_hf_model(kData + name, options);
  REQUIRE_MESSAGE(model.is_ok(), model.message());
  return model->graph;
}

RunSettings run_of(const std::string& folder, const std::string& transformers, TrainMode mode) {
  RunSettings settings;
  settings.model = kData + folder;
  settings.gpu = "h100-sxm";
  settings.mode = mode;
  settings.lora.rank = 16;
  settings.seq_len = 512;
  if (!transformers.empty()) settings.versions = {{"transformers", transformers}};
  return settings;
}

}  // namespace

TEST_CASE("the transformers release picks the experts' layout") {
  CHECK_FALSE(experts_as_modules(run_of("mixtral-2l", "", TrainMode::kLora)));  // unpinned: the current 5.x
  CHECK(experts_as_modules(run_of("mixtral-2l", "4.44.2", TrainMode::kLora)));
  CHECK_FALSE(experts_as_modules(run_of("mixtral-2l", "5.0.0", TrainMode::kLora)));
  Result<FitAnswer> loop = fit(run_of("mixtral-2l", "4.44.2", TrainMode::kLora));
  REQUIRE_MESSAGE(loop.is_ok(), loop.message());
  const std::vector<std::string>& notes = loop->warnings;
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("transformers 4.x's layout") != std::string::npos &&
           n.find("balanced routing (tokens x 2 / 8 rows per expert)") != std::string::npos;
  }));
}

TEST_CASE("QLoRA under 4.x quantizes every expert Linear and the router, under 5.x neither") {
  RunSettings settings = run_of("mixtral-2l", "4.44.2", TrainMode::kQlora);
  Result<graph::LayerGraph> loop = apply_training_mode(load("mixtral-2l", true), settings);
  REQUIRE_MESSAGE(loop.is_ok(), loop.message());
  const std::string moe = "model.layers.0.block_sparse_moe.";
  for (const char* name : {"experts.0.w1.weight", "experts.7.w2.weight", "experts.3.w3.weight", "gate.weight"}) {
    const graph::Param* param = find_param(loop.value(), moe + name);
    REQUIRE_MESSAGE(param != nullptr, name);
    CHECK_MESSAGE(param->dtype == graph::DType::kNF4, name);
  }
  const std::vector<std::string> notes = moe_notes(loop.value(), settings);
  REQUIRE(notes.size() == 2);
  CHECK(notes[1].find("the experts are NF4 here") != std::string::npos);
  settings.versions = {{"transformers", "5.23.0"}};
  Result<graph::LayerGraph> fused = apply_training_mode(load("mixtral-2l", false), settings);
  REQUIRE(fused.is_ok());
  CHECK(find_param(fused.value(), "model.layers.0.mlp.experts.gate_up_proj")->dtype == graph::DType::kBF16);
}

TEST_CASE("LoRA on 4.x expert names is a plain LoRA per expert Linear, no ParamWrapper") {
  RunSettings settings = run_of("mixtral-2l", "4.44.2", TrainMode::kLora);
  settings.lora.targets = {"q_proj", "v_proj", "w1", "w2", "w3"};
  Result<graph::LayerGraph> loop = apply_training_mode(load("mixtral-2l", true), settings);
  REQUIRE_MESSAGE(loop.is_ok(), loop.message());
  const graph::Param* a = find_param(loop.value(), "model.layers.1.block_sparse_moe.experts.5.w3.lora_A.weight");
  REQUIRE(a != nullptr);
  CHECK(a->shape == std::vector<int64_t>{16, 4096});  // [r, in]: one expert's, not [E*r, in]
  for (const graph::Tensor& tensor : loop->tensors) CHECK(!tensor.name.ends_with(".lora_recomposed"));
  CHECK(find_param(loop.value(), "model.layers.0.block_sparse_moe.gate.lora_A.weight") == nullptr);
  const std::vector<std::string> notes = moe_notes(loop.value(), settings);
  REQUIRE(notes.size() == 2);
  CHECK(notes[1].find("48 expert Linears carry an ordinary LoRA adapter") != std::string::npos);
}

TEST_CASE("under 4.x the MoE families are priced from the release that has their class") {
  // Qwen3-MoE came with transformers 4.51, OLMoE with 4.45, both as the same loop;
  // DeepSeek-V3 with 4.51.0, DeepSeek-V2 with 4.54.0 (docs/models.md).
  const std::pair<const char*, const char*> runs[] = {
      {"mixtral-2l", "4.44.2"},          {"qwen2-moe-2l", "4.44.2"},   {"qwen3-moe-2l", "4.51.3"},
      {"olmoe-2l", "4.51.3"},            {"deepseek-v3-2l", "4.51.0"}, {"deepseek-v2-lite-2l", "4.54.0"},
      {"deepseek-v2-lite-2l", "4.57.6"}, {"deepseek-v3-2l", "4.57.6"}};
  for (const auto& [folder, release] : runs) {
    Result<FitAnswer> answer = fit(run_of(folder, release, TrainMode::kQlora));
    CHECK_MESSAGE(answer.is_ok(), folder, ": ", answer.message());
  }
  // Before its class the model is trust_remote_code's modeling_deepseek.py: refused by name.
  const std::pair<const char*, const char*> refused[] = {
      {"deepseek-v2-lite-2l", "4.53.3"}, {"deepseek-v3-2l", "4.50.3"}, {"deepseek-v2-lite-2l", "4.44.2"}};
  for (const auto& [folder, release] : refused) {
    Result<FitAnswer> answer = fit(run_of(folder, release, TrainMode::kLora));
    REQUIRE_FALSE(answer.is_ok());
    CHECK(answer.message().find(std::string("transformers ") + release + " has no DeepseekV") != std::string::npos);
    CHECK(answer.message().find("trust_remote_code") != std::string::npos);
    CHECK(fit(run_of(folder, "5.23.0", TrainMode::kLora)).is_ok());
  }
}

TEST_CASE("DeepSeek under 4.57.6: QLoRA makes the expert Linears NF4, LoRA wraps each one") {
  RunSettings settings = run_of("deepseek-v2-lite-2l", "4.57.6", TrainMode::kQlora);
  Result<graph::LayerGraph> qlora = apply_training_mode(load("deepseek-v2-lite-2l", true), settings);
  REQUIRE_MESSAGE(qlora.is_ok(), qlora.message());
  const std::string moe = "model.layers.1.mlp.";
  for (const char* name : {"experts.0.gate_proj.weight", "experts.63.down_proj.weight", "shared_experts.up_proj.weight"}) {
    const graph::Param* param = find_param(qlora.value(), moe + name);
    REQUIRE_MESSAGE(param != nullptr, name);
    CHECK_MESSAGE(param->dtype == graph::DType::kNF4, name);
  }
  std::vector<std::string> notes = moe_notes(qlora.value(), settings);
  REQUIRE(!notes.empty());
  CHECK(notes[0].find("64 experts, top-6") != std::string::npos);
  CHECK(notes[1].find("the experts are NF4 here") != std::string::npos);
  settings = run_of("deepseek-v3-2l", "4.57.6", TrainMode::kLora);
  settings.lora.targets = {"q_a_proj", "gate_proj", "up_proj", "down_proj"};
  Result<graph::LayerGraph> lora = apply_training_mode(load("deepseek-v3-2l", true), settings);
  REQUIRE_MESSAGE(lora.is_ok(), lora.message());
  const graph::Param* a = find_param(lora.value(), "model.layers.1.mlp.experts.255.up_proj.lora_A.weight");
  REQUIRE(a != nullptr);
  CHECK(a->shape == std::vector<int64_t>{16, 7168});  // one expert's [r, in]
  notes = moe_notes(lora.value(), settings);
  REQUIRE(notes.size() == 2);
  CHECK(notes[0].find("256 experts, top-8") != std::string::npos);
  CHECK(notes[1].find("768 expert Linears carry an ordinary LoRA adapter") != std::string::npos);
}

}  // namespace headroom::planner
