// What PEFT makes of a LoRA target list (planner/mechanisms/peft_targets.h and
// peft_param_wrapper.h): the "all-linear" shorthand as PEFT 0.21.2 resolves it, and
// the MoE targets PEFT turns into ParamWrapper LoRA on fused expert weights. The adapter counts
// are PEFT's own on transformers 5.23.0 (LoraConfig(r=16, target_modules="all-linear")
// on the config.json built on the meta device, the oracle's trl environment:
// bench/oracle/peft_all_linear.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "planner/mechanisms/trainability.h"
#include "planner/predict/model_context.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

RunSettings lora_run(const std::string& model, std::vector<std::string> targets) {
  RunSettings s;
  s.model = model.find('/') == std::string::npos ? model : std::string(HEADROOM_SOURCE_DIR) + "/" + model;
  s.gpu = "h200";
  s.mode = TrainMode::kLora;
  s.lora.rank = 16;
  s.lora.targets = std::move(targets);
  s.versions = {{"transformers", "5.23.0"}, {"peft", "0.21.2"}};
  return s;
}

// Adapter parameters (lora_A and lora_B) of the run's graph, or -1 when refused.
int64_t adapter_parameters(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  if (!context.is_ok()) return -1;
  int64_t count = 0;
  for (const graph::Node& node : context.value().graph.nodes) {
    for (const graph::Param& param : node.params) count += is_lora_adapter(param) ? param.elements() : 0;
  }
  return count;
}

}  // namespace

TEST_CASE("all-linear adapts every linear but the output layer, as PEFT counts them") {
  // Qwen1.5-MoE: attention, the shared expert and its gate (the routed experts are
  // 3-D parameters PEFT does not convert for qwen2_moe, the router is no nn.Linear).
  CHECK(adapter_parameters(lora_run("tests/data/hf/qwen1.5-moe-a2.7b", {"all-linear"})) == 15925632);
  CHECK(adapter_parameters(lora_run("tests/data/hf/phi-3-mini-4k", {"all-linear"})) == 25165824);
  // GPT-2's Conv1D layers are linear to PEFT; lm_head (tied) is left out.
  CHECK(adapter_parameters(lora_run("tests/data/hf/gpt2-medium", {"all-linear"})) == 6291456);
  // Any case, as PEFT lowers it; on Llama the seven projections.
  CHECK(adapter_parameters(lora_run("llama-3-8b", {"ALL-Linear"})) ==
        adapter_parameters(lora_run("llama-3-8b", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                   "down_proj"})));
}

TEST_CASE("all-linear leaves a reward model's score head to train in full") {
  RunSettings reward = lora_run("tests/data/hf/qwen2.5-0.5b/config.json", {"all-linear"});
  reward.stack = Stack::kHfTrainer;
  reward.precision = Precision::kBf16Pure;
  reward.recipe = Recipe::kReward;
  reward.versions["trl"] = "1.16.0";
  reward.train_patterns = {"score"};
  Result<ModelContext> context = prepare_context(reward);
  REQUIRE(context.is_ok());
  for (const graph::Node& node : context.value().graph.nodes) {
    if (node.name != "score") continue;
    for (const graph::Param& param : node.params) CHECK_FALSE(is_lora_adapter(param));
  }
}

TEST_CASE("expert and router targets become ParamWrapper LoRA with PEFT's adapter counts") {
  // PEFT 0.21.2 on transformers 5.23.0, r=16 (bench/oracle/peft_all_linear.py's way):
  // gate_up_proj at rank 32 (rank_pattern), down_proj and the router's weight at 16;
  // DeepSeek's dense and shared-expert MLPs lose their adapters once gate_proj is named.
  const std::vector<std::string> mlp = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                        "gate"};
  const auto count = [](const std::string& model, std::vector<std::string> targets) {
    RunSettings s = lora_run(model, std::move(targets));
    s.lora.dropout = 0;
    return adapter_parameters(s);
  };
  CHECK(count("tests/data/hf/qwen3-moe-2l", mlp) == 41521152);
  CHECK(count("tests/data/hf/qwen3-moe-2l", {"all-linear"}) == 41521152);
  CHECK(count("tests/data/hf/olmoe-2l", mlp) == 23660544);
  CHECK(count("tests/data/hf/deepseek-v2-lite-2l", mlp) == 13829120);
  CHECK(count("tests/data/hf/deepseek-v2-lite-2l", {"all-linear"}) == 14060544);
  CHECK(count("tests/data/hf/mixtral-2l", {"q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3", "gate"}) ==
        22479104);
}

TEST_CASE("a wrapped expert stack is recomposed at full size and kept for backward") {
  RunSettings s = lora_run("tests/data/hf/qwen3-moe-2l", {"q_proj", "gate_proj", "up_proj"});
  s.lora.dropout = 0;
  Result<ModelContext> context = prepare_context(s);
  REQUIRE(context.is_ok());
  const graph::LayerGraph& g = context.value().graph;
  const graph::Node* gate_up = g.find_node("model.layers.0.mlp.experts.gate_up_proj");
  REQUIRE(gate_up != nullptr);
  const std::string recomposed = gate_up->name + ".lora_recomposed";
  const graph::Tensor* copy = g.find_tensor(recomposed);
  REQUIRE(copy != nullptr);
  CHECK(copy->elements.at(1, 1) == 128 * 1536 * 2048);  // [E, 2 x 768, 2048]
  CHECK(std::any_of(gate_up->saves.begin(), gate_up->saves.end(),
                    [&](const graph::SavedRef& saved) { return saved.tensor == recomposed; }));
  CHECK(gate_up->backward_workspace().at(1, 1) >= 128 * 1536 * 2048);  // dW' at full size
  // down_proj was not named: unwrapped, nothing recomposed.
  CHECK(g.find_tensor("model.layers.0.mlp.experts.down_proj.lora_recomposed") == nullptr);
}

TEST_CASE("ParamWrapper targets PEFT cannot run are refused by name") {
  RunSettings half = lora_run("tests/data/hf/qwen3-moe-2l", {"q_proj", "gate_proj"});
  half.lora.dropout = 0;
  Result<ModelContext> refused = prepare_context(half);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("without also targeting 'up_proj'") != std::string::npos);
  // lora.ParamWrapper raises on dropout.
  refused = prepare_context(lora_run("mixtral-8x7b", {"all-linear"}));
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("lora.dropout") != std::string::npos);
  // FSDP1's flat parameters break ParamWrapper's reshape (the oracle's run raises).
  RunSettings fsdp1 = lora_run("tests/data/hf/qwen3-moe-2l", {"all-linear"});
  fsdp1.lora.dropout = 0;
  fsdp1.gpus_per_node = 2;
  fsdp1.zero_stage = 3;
  fsdp1.sharding = Sharding::kFsdp1;
  refused = prepare_context(fsdp1);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("FSDP1's flat parameters") != std::string::npos);
  fsdp1.sharding = Sharding::kFsdp2;
  CHECK(prepare_context(fsdp1).is_ok());
  // torchtune's and litgpt's own LoRA is not PEFT's conversion.
  RunSettings litgpt = lora_run("tests/data/hf/mixtral-2l", {"q_proj", "w1", "w3"});
  litgpt.lora.dropout = 0;
  litgpt.stack = Stack::kLitgpt;
  refused = prepare_context(litgpt);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("stack's own LoRA on fused experts is not priced") != std::string::npos);
  // The attention alone is ordinary LoRA on nn.Linear, with the default dropout.
  CHECK(adapter_parameters(lora_run("mixtral-8x7b", {"q_proj", "k_proj", "v_proj", "o_proj"})) > 0);
}

}  // namespace headroom::planner
