// What PEFT makes of a LoRA target list (planner/mechanisms/peft_targets.h): the
// "all-linear" shorthand as PEFT 0.21.2 resolves it, and the MoE targets PEFT turns
// into ParamWrapper LoRA on fused expert weights, refused by name. The adapter counts
// are PEFT's own on transformers 5.23.0 (LoraConfig(r=16, target_modules="all-linear")
// on the config.json built on the meta device, the oracle's trl environment:
// bench/oracle/peft_all_linear.py).
#include <doctest/doctest.h>

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

TEST_CASE("LoRA targets PEFT turns into ParamWrapper LoRA on fused experts are refused by name") {
  for (const auto& [model, targets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"mixtral-8x7b", {"all-linear"}},
           {"mixtral-8x7b", {"q_proj", "w2"}},
           {"deepseek-v2-lite", {"q_proj", "gate_proj"}},
           {"qwen3-30b-a3b", {"all-linear"}}}) {
    const Result<ModelContext> context = prepare_context(lora_run(model, targets));
    REQUIRE_FALSE(context.is_ok());
    CHECK(context.status().message().find("ParamWrapper") != std::string::npos);
  }
  // The attention alone is ordinary LoRA on nn.Linear.
  CHECK(adapter_parameters(lora_run("mixtral-8x7b", {"q_proj", "k_proj", "v_proj", "o_proj"})) > 0);
}

}  // namespace headroom::planner
