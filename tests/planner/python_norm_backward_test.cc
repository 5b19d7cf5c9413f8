// The backward of an RMSNorm in Python ops (planner/time/python_norm_backward.h):
// five float32 tensors of its input's size at once inside PowBackward0, measured on
// the meta device by the oracle (tests/oracle/test_trl_reward_tiny.py: mul x3, div
// and pow at the final norm's backward, the peak of a reward model's step).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "planner/predict/model_context.h"
#include "planner/time/python_norm_backward.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 256;
constexpr int64_t kHidden = 256;  // tests/data/oracle/tiny-llama

// TRL 1.16.0's RewardTrainer on the tiny Llama as the oracle's suite runs it: LoRA r16
// on q/v with `score` trained, pure bf16, 2 pairs of 256 tokens, no checkpointing.
RunSettings tiny_reward_lora() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/oracle/tiny-llama";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.micro_batch = kBatch;
  s.seq_len = kSeq;
  s.lora.rank = 16;
  s.lora.targets = {"q_proj", "v_proj"};
  s.lora.dropout = 0.05;
  s.train_patterns = {"score"};
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}, {"trl", "1.16.0"}};
  s.recipe = Recipe::kReward;
  return s;
}

int node_named(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].name == name) return static_cast<int>(n);
  }
  FAIL("no node " << name);
  return -1;
}

}  // namespace

TEST_CASE("a Python RMSNorm's backward holds five float32 copies of its input where its input needs a gradient") {
  Result<ModelContext> context = prepare_context(tiny_reward_lora());
  REQUIRE(context.is_ok());
  const graph::LayerGraph& graph = context.value().graph;
  const graph::GraphAnalysis& analysis = context.value().analysis;
  // A reward pair batch is 2 x 2 rows of 256 tokens.
  const int64_t f32_copy = 4 * (2 * kBatch) * kSeq * kHidden;
  CHECK(python_norm_backward_bytes(graph, analysis, node_named(graph, "model.norm"), kBatch, kSeq,
                                   Accounting::kAllocated) == 5 * f32_copy);
  // Layer 0's input norm reads the frozen embedding's output: no input gradient, no chain.
  CHECK(python_norm_backward_bytes(graph, analysis, node_named(graph, "model.layers.0.input_layernorm"), kBatch,
                                   kSeq, Accounting::kAllocated) == 0);
  // Not a norm.
  CHECK(python_norm_backward_bytes(graph, analysis, node_named(graph, "score"), kBatch, kSeq,
                                   Accounting::kAllocated) == 0);
}

TEST_CASE("a reward model's peak is its final norm's backward, as the oracle measures") {
  // The oracle (env trl): 52,252,080 bytes in the final norm's PowBackward0; -2.95%
  // at layer 3's backward without the chain.
  const Prediction p = predict_as_given(tiny_reward_lora());
  const double error = (static_cast<double>(p.peak_allocated - p.peak.workspaces) - 52252080.0) / 52252080.0;
  MESSAGE("error " << 100 * error << "% at " << p.where.phase << " " << p.where.block_name);
  CHECK(std::abs(error) < 0.01);
  CHECK(p.where.phase == "backward");
  CHECK(p.where.block_name == "head");
}

}  // namespace headroom::planner
