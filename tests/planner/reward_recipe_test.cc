// Reward modelling as TRL's RewardTrainer runs it (trl/trainer/reward_trainer.py,
// 1.16.0; docs/stacks.md, "Recipes"): AutoModelForSequenceClassification(num_labels=1),
// a one-value `score` head in place of the LM head, chosen and rejected rows in one
// batch of twice the micro-batch, no reference model.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "models/zoo.h"
#include "planner/mechanisms/reward_head.h"
#include "planner/settings/validate_settings.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

// Qwen2.5-0.5B (its config.json, tied embeddings) in pure bf16 on an H200, as the
// oracle's trl-reward rows run it: TRL 1.16.0, LoRA r16 on q/v with `score` trained
// (PEFT's SEQ_CLS modules_to_save), no checkpointing, 1 pair of 512 tokens.
RunSettings trl_qwen_reward(TrainMode mode) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2.5-0.5b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = mode;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}, {"trl", "1.16.0"}};
  s.recipe = Recipe::kReward;
  if (mode == TrainMode::kLora) {
    s.lora.rank = 16;
    s.lora.targets = {"q_proj", "v_proj"};
    s.train_patterns = {"score"};
  }
  return s;
}

graph::LayerGraph zoo_graph(const char* name) {
  Result<graph::LayerGraph> graph = models::build_zoo_model(name, models::ZooOptions{});
  REQUIRE(graph.is_ok());
  return std::move(graph.value());
}

}  // namespace

TEST_CASE("the reward head replaces the LM head with a one-value score and drops the vocabulary-sized logits") {
  graph::LayerGraph graph = zoo_graph("llama-3-8b");
  const int64_t before = graph.parameter_count();
  REQUIRE(apply_reward_head(graph).is_ok());
  CHECK(find_param(graph, "lm_head.weight") == nullptr);
  const graph::Param* score = find_param(graph, "score.weight");
  REQUIRE(score != nullptr);
  CHECK(score->shape == std::vector<int64_t>{1, 4096});
  CHECK(score->tied_to.empty());
  // Llama 3 8B's untied LM head is 128256 x 4096; the score keeps 4096 of it.
  CHECK(before - graph.parameter_count() == 128256LL * 4096 - 4096);
  for (const graph::Tensor& tensor : graph.tensors) {
    INFO(tensor.name);
    CHECK(tensor.elements.at(2, 1024) <= 2LL * 1024 * 14336);  // nothing per vocabulary entry is left
    CHECK(!tensor.name.ends_with(":log_probs"));
  }
  const graph::Node* loss = graph.find_node("loss");
  REQUIRE(loss != nullptr);
  CHECK(loss->saves.empty());
  CHECK(graph.find_node(kRewardHead) != nullptr);
}

TEST_CASE("a tied embedding stays when the reward head replaces the tied LM head") {
  graph::LayerGraph graph = zoo_graph("gpt2");
  const int64_t before = graph.parameter_count();
  REQUIRE(apply_reward_head(graph).is_ok());
  CHECK(find_param(graph, "transformer.wte.weight") != nullptr);
  CHECK(graph.parameter_count() - before == 768);  // the tied head counted nothing; the score is new
}

TEST_CASE("a model without a causal-LM loss gets no reward head") {
  graph::LayerGraph flux = zoo_graph("tiny-flux");
  const Status refused = apply_reward_head(flux);
  CHECK(refused.code() == StatusCode::kUnsupported);
  CHECK(refused.message().find("causal LM") != std::string::npos);
}

TEST_CASE("reward modelling matches the oracle's RewardTrainer step: Qwen2.5-0.5B LoRA, 1 pair of 512 tokens") {
  // bench/oracle/grid.json trl-reward[trl]/qwen2.5-0.5b/lora/none/b1s512: the oracle's
  // peak is 2,116,626,128 bytes (bench/oracle/recorded/grid-rows.json.gz).
  const Prediction reward = predict_as_given(trl_qwen_reward(TrainMode::kLora));
  CHECK(static_cast<double>(reward.peak_allocated) == doctest::Approx(2116626128.0).epsilon(0.02));
  // The Trainer's own causal-LM step over the same two rows (transformers' loss, no TRL
  // fused head) keeps the fp32 log-probs over 151,936 entries a token.
  RunSettings sft = trl_qwen_reward(TrainMode::kLora);
  sft.recipe.reset();
  sft.versions.erase("trl");
  sft.micro_batch = 2;
  sft.train_patterns.clear();
  const Prediction supervised = predict_as_given(sft);
  CHECK(supervised.peak_allocated - reward.peak_allocated > 2LL * 512 * 151936 * 4);
  // A pair is one sample of two rows: the same tokens a second as the SFT step's.
  CHECK(reward.time.samples_per_s == doctest::Approx(reward.time.tokens_per_s / (2 * 512)));
}

TEST_CASE("full reward modelling trains the score head with the rest, LoRA trains it beside the adapters") {
  const Prediction full = predict_as_given(trl_qwen_reward(TrainMode::kFull));
  const Prediction lora = predict_as_given(trl_qwen_reward(TrainMode::kLora));
  CHECK(full.allocated.optimizer_states > lora.allocated.optimizer_states);
  RunSettings frozen_score = trl_qwen_reward(TrainMode::kLora);
  frozen_score.train_patterns.clear();
  // The score's AdamW moments: 896 elements x 2 moments in the head's bf16 (PEFT's
  // modules_to_save copies the module as loaded), rounded up to 512 bytes each.
  const int64_t states = lora.allocated.optimizer_states - predict_as_given(frozen_score).allocated.optimizer_states;
  CHECK(states >= 2 * 896 * 2);
  CHECK(states <= 2 * 896 * 2 + 2 * 512);
}

TEST_CASE("reward modelling is refused where it is not modelled, by name") {
  RunSettings torchtune = trl_qwen_reward(TrainMode::kLora);
  torchtune.stack = Stack::kTorchtune;
  const Status not_trainer = validate_settings(torchtune, "flags");
  CHECK(not_trainer.message().find("RewardTrainer") != std::string::npos);
  RunSettings old_trl = trl_qwen_reward(TrainMode::kLora);
  old_trl.versions["trl"] = "0.23.1";
  const Status two_forwards = validate_settings(old_trl, "flags");
  CHECK(two_forwards.message().find("two forwards") != std::string::npos);
  RunSettings with_reference = trl_qwen_reward(TrainMode::kLora);
  with_reference.reference = Reference::kPrecomputed;
  CHECK(validate_settings(with_reference, "flags").message().find("DPO") != std::string::npos);
  CHECK(validate_settings(trl_qwen_reward(TrainMode::kLora), "flags").is_ok());
}

}  // namespace headroom::planner
