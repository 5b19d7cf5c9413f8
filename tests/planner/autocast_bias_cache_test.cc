// Autocast caches the 16-bit casts of trainable fp32 biases to the forward's end, as
// it caches the weights' (torch 2.11 aten/src/ATen/autocast_mode.cpp, cached_cast: any
// fp32 leaf that requires grad); no backward saves them, so the cache alone holds them
// (planner/mechanisms/autocast.h, autocast_cached_bias_elements).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "planner/mechanisms/autocast.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// BERT-base fully fine-tuned under the Trainer's bf16 AMP, B = 8, S = 128, no
// checkpointing (grid row hf-trainer/bert-base-uncased/full/bf16-amp/none/b8s128).
RunSettings bert_full_amp(TrainMode mode) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/bert-base-uncased/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Amp;
  s.stack = Stack::kHfTrainer;
  s.mode = mode;
  s.micro_batch = 8;
  s.seq_len = 128;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  return s;
}

int64_t cached_bias(const ModelContext& context, const std::string& node) {
  const graph::Node* found = context.graph.find_node(node);
  REQUIRE(found != nullptr);
  return autocast_cached_bias_elements(*found);
}

}  // namespace

TEST_CASE("autocast caches a trainable bias's 16-bit cast, not a frozen one's") {
  const ModelContext full = prepared_context(bert_full_amp(TrainMode::kFull));
  CHECK(cached_bias(full, "bert.encoder.layer.0.intermediate.dense") == 3072);
  CHECK(cached_bias(full, "bert.encoder.layer.0.attention.self.query") == 768);
  CHECK(cached_bias(full, "bert.encoder.layer.0.attention.output.LayerNorm") == 0);  // fp32 list, no cast
  const ModelContext lora = prepared_context(bert_full_amp(TrainMode::kLora));
  CHECK(cached_bias(lora, "bert.encoder.layer.0.intermediate.dense") == 0);  // frozen: cast per call
}

TEST_CASE("BERT under AMP peaks at the end of its last layer's forward, the biases' casts cached") {
  // The oracle (hf-trainer/bert-base-uncased/full/bf16-amp/none/b8s128): 1,899,118,752 bytes
  // at layer 11's output LayerNorm, no gradient yet, 14,325,764 transient, of which
  // 165,888 are the cached bf16 casts of the 72 encoder biases ([768] x 60, [3072] x 12).
  // Without them headroom's forward there was 180 KB short of the oracle's and its
  // peak fell in layer 11's backward, with 2,375,168 bytes of gradients.
  const Prediction p = predict_as_given(bert_full_amp(TrainMode::kFull));
  CHECK(p.where.block_name == "bert.encoder.layer.11");
  CHECK(p.where.phase == "forward");
  CHECK(p.peak_as_allocated.gradients == 0);
  // Layer 11's own casts (13,824 bytes) are counted from the next block on.
  CHECK(std::abs(p.peak_as_allocated.transient - 14325764) < 20 * 1024);
  CHECK(std::abs(p.peak_allocated - p.peak.workspaces - 1899118752) < 32 * 1024);
}

}  // namespace headroom::planner
