// Gemma 2's soft-capping in the prediction: under eager attention every layer keeps
// the bf16 tanh of its [B, heads, S, S] scores, and the head the bf16 tanh of the
// [B*S, vocab] logits, all live at the peak (the loss's backward). The meta-device
// oracle (bench/oracle/grid.json, gemma2-eager) holds the whole runs within 0.3%.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "planner/predict/planner.h"
#include "tests/planner/predict_as_given.h"
#include "tests/support/temp_dir.h"

namespace headroom::planner {
namespace {

// google/gemma-2-9b with 2 layers (tests/data/hf/gemma-2-9b-2layers), soft-capping as given.
std::string gemma2_config(const testing::TempDir& dir, const std::string& name, bool attn_cap, bool final_cap) {
  std::ifstream in(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/gemma-2-9b-2layers/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  if (!attn_cap) config["attn_logit_softcapping"] = nullptr;
  if (!final_cap) config["final_logit_softcapping"] = nullptr;
  std::filesystem::create_directories(dir.file(name));
  const std::string path = dir.file(name) + "/config.json";
  std::ofstream(path) << config.dump();
  return path;
}

RunSettings gemma2_lora(const std::string& model) {
  RunSettings s;
  s.model = model;
  s.gpu = "a100-80g";
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.precision = Precision::kBf16Pure;
  s.micro_batch = 2;
  s.seq_len = 2048;
  s.stack = Stack::kHfTrainer;
  s.attention = models::AttentionImpl::kEager;
  s.versions["transformers"] = "5.23.0";
  return s;
}

}  // namespace

TEST_CASE("Gemma 2 eager: soft-capping adds the tanh of the scores per layer and of the logits to the peak") {
  const testing::TempDir dir;
  const Prediction both = predict_as_given(gemma2_lora(gemma2_config(dir, "both", true, true)));
  const Prediction logits_only = predict_as_given(gemma2_lora(gemma2_config(dir, "logits", false, true)));
  const Prediction none = predict_as_given(gemma2_lora(gemma2_config(dir, "none", false, false)));
  const int64_t batch = 2, seq = 2048, heads = 16, layers = 2, vocab = 256'000;
  CHECK(both.peak_allocated - logits_only.peak_allocated == layers * batch * heads * seq * seq * 2);
  CHECK(logits_only.peak_allocated - none.peak_allocated == batch * seq * vocab * 2);
}

}  // namespace headroom::planner
