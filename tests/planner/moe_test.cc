// Mixture-of-experts models in the planner: autocast keeps the routed rows
// 16-bit, QLoRA leaves the 3-D experts unquantized as bitsandbytes does, LoRA
// cannot target them, and the notes name the routing assumption.
#include <doctest/doctest.h>

#include <string>

#include "models/hf_import.h"
#include "planner/mechanisms/autocast.h"
#include "planner/mechanisms/trainability.h"
#include "planner/predict/moe_notes.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

graph::LayerGraph load(const std::string& name) {
  Result<models::HfModel> model =
      models::load_hf_model(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/" + name, models::ZooOptions{});
  REQUIRE_MESSAGE(model.is_ok(), model.message());
  return model->graph;
}

}  // namespace

TEST_CASE("autocast over a 16-bit MoE: the fp32 router's int64 indices do not make the routed rows fp32") {
  // The Trainer's bf16=True autocast over a bf16 model: softmax(dtype=float32)
  // and topk's values are fp32, but hidden_states[perm // k] gathers bf16 rows
  // (the meta-device oracle: index (4096, 2048) bfloat16 at batch 1, seq 512).
  graph::LayerGraph g = load("qwen3-moe-2l");
  apply_autocast(g, AutocastWeights::kSixteenBitModel);
  const graph::Tensor* rows = g.find_tensor("model.layers.0.mlp.experts.gather");
  REQUIRE(rows != nullptr);
  CHECK(rows->dtype.value_or(graph::DType::kBF16) == graph::DType::kBF16);
  const graph::Tensor* gate_up = g.find_tensor("model.layers.0.mlp.experts.gate_up_proj");
  REQUIRE(gate_up != nullptr);
  CHECK(gate_up->dtype.value_or(graph::DType::kBF16) == graph::DType::kBF16);
  CHECK(g.find_tensor("model.layers.0.mlp.gate.softmax")->dtype == graph::DType::kF32);
  CHECK(g.find_tensor("model.layers.0.mlp.gate.topk")->dtype == graph::DType::kInt64);
}

TEST_CASE("QLoRA on an MoE: attention is NF4, the 3-D experts and the router stay 16-bit") {
  RunSettings settings;
  settings.versions = {{"transformers", "5.23.0"}};
  settings.mode = TrainMode::kQlora;
  settings.lora.rank = 16;
  Result<graph::LayerGraph> qlora = apply_training_mode(load("qwen3-moe-2l"), settings);
  REQUIRE_MESSAGE(qlora.is_ok(), qlora.message());
  CHECK(find_param(qlora.value(), "model.layers.0.self_attn.q_proj.weight")->dtype == graph::DType::kNF4);
  CHECK(find_param(qlora.value(), "model.layers.0.mlp.experts.gate_up_proj")->dtype == graph::DType::kBF16);
  CHECK(find_param(qlora.value(), "model.layers.0.mlp.experts.down_proj")->dtype == graph::DType::kBF16);
  CHECK(find_param(qlora.value(), "model.layers.0.mlp.gate.weight")->dtype == graph::DType::kBF16);
  CHECK(find_param(qlora.value(), "model.layers.0.mlp.experts.gate_up_proj.lora_A.weight") == nullptr);
  // The note names the unquantized experts: 2 layers x 128 x 3 x 2048 x 768 bf16 = 2.25 GiB.
  const std::vector<std::string> notes = moe_notes(qlora.value(), settings);
  REQUIRE(notes.size() == 2);
  CHECK(notes[1].find("2.2 GiB stay unquantized") != std::string::npos);
  // PEFT targets modules: the experts' 5.x parameter name is no target (their 4.x names
  // are, through ParamWrapper: peft_param_wrapper.h).
  settings.mode = TrainMode::kLora;
  settings.lora.targets = {"gate_up_proj"};
  Result<graph::LayerGraph> experts = apply_training_mode(load("qwen3-moe-2l"), settings);
  REQUIRE_FALSE(experts.is_ok());
  CHECK(experts.message().find("lora.targets") != std::string::npos);
}

TEST_CASE("the MoE routing note: k of E experts, grouped path, no routing term in the band") {
  RunSettings settings;
  settings.versions = {{"transformers", "5.23.0"}};
  const graph::LayerGraph g = load("mixtral-8x7b");
  const std::vector<std::string> notes = moe_notes(g, settings);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("32 sparse layers, 8 experts, top-2") != std::string::npos);
  CHECK(notes[0].find("Routing assumption") != std::string::npos);
  CHECK(notes[0].find("all tokens on one expert per layer") != std::string::npos);
  CHECK(moe_notes(load("mistral-7b"), settings).empty());
}

// A fused graph under a 4.x release is a family whose 4.x layout is not built (the four
// that have one are built as models/moe_loop.h under 4.x: tests/planner/moe_loop_test.cc).
TEST_CASE("fused experts under a 4.x release are refused by name, and the answer says which layout it priced") {
  RunSettings settings;
  settings.model = "mixtral-8x7b";
  settings.mode = TrainMode::kQlora;
  const graph::LayerGraph g = load("mixtral-8x7b");
  CHECK(refuse_unfused_experts(g, settings).is_ok());  // no release given: priced, and said
  const std::vector<std::string> notes = moe_notes(g, settings);
  REQUIRE_FALSE(notes.empty());
  CHECK(notes.back().find("Before 5.0 each expert is its own nn.Linear") != std::string::npos);
  settings.versions = {{"transformers", "4.46.0"}};
  const Status refused = refuse_unfused_experts(g, settings);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("versions: before transformers 5.0") != std::string::npos);
  CHECK(refused.message().find("not for mixtral") != std::string::npos);
  settings.versions = {{"transformers", "5.0.0"}};
  CHECK(refuse_unfused_experts(g, settings).is_ok());
  // A dense model is no concern of it.
  settings.versions = {{"transformers", "4.46.0"}};
  CHECK(refuse_unfused_experts(load("llama-3-8b"), settings).is_ok());
}

}  // namespace headroom::planner
