// Liger's fused linear cross-entropy (--loss fused-linear-ce): the [B*S, V] logits
// never exist; the head keeps grad_input [B*S, H] from forward to backward, and
// its forward holds one chunk of logits and, when lm_head trains, grad_weight.
#include <doctest/doctest.h>

#include "models/zoo.h"
#include "planner/mechanisms/loss_variants.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 4096;
constexpr int64_t kHidden = 4096;   // Llama 3 8B
constexpr int64_t kVocab = 128256;

const graph::Node& node_named(const graph::LayerGraph& g, const std::string& op) {
  for (const graph::Node& node : g.nodes) {
    if (node.op == op) return node;
  }
  FAIL("no node with op " << op);
  return g.nodes.front();
}

graph::LayerGraph fused(graph::LayerGraph g, bool fp32_weights = false) {
  apply_loss_impl(g, LossSpec{LossImpl::kFusedLinearCe, 8}, false, fp32_weights);
  return g;
}

// Llama 3 8B's graph with lm_head trained (full fine-tuning) or frozen (LoRA).
graph::LayerGraph llama(bool head_trains) {
  graph::LayerGraph g = models::build_zoo_model("llama-3-8b", models::ZooOptions{}).value();
  for (graph::Node& node : g.nodes) {
    if (node.linear && node.linear->out_features == kVocab) {
      for (graph::Param& param : node.params) param.trainable = head_trains;
    }
  }
  return g;
}

}  // namespace

TEST_CASE("fused linear cross-entropy: no logits tensor, grad_input kept, one chunk in forward") {
  const graph::LayerGraph original = llama(false);
  const graph::LayerGraph g = fused(original);
  const int64_t tokens = kBatch * kSeq;
  // Nothing of B*S*V elements is left in the graph.
  for (const graph::Tensor& tensor : g.tensors) CHECK(tensor.elements.at(kBatch, kSeq) < tokens * kVocab);
  CHECK(g.find_node(node_named(original, "loss").name + ".upcast") == nullptr);
  const graph::Node& head = node_named(g, "fused_linear_ce");
  REQUIRE(head.outputs.size() == 1);
  const graph::Tensor* grad_input = g.find_tensor(head.outputs.front());
  REQUIRE(grad_input != nullptr);
  CHECK(grad_input->elements.at(kBatch, kSeq) == tokens * kHidden);
  CHECK(saves(head, grad_input->name));
  CHECK_FALSE(head.linear.has_value());
  // Forward transients of a frozen head: a chunk of logits (bounded by 2*BT*H + V),
  // the grad_input chunk and loss_1d; no weight gradient.
  CHECK(head.workspace_elements.at(kBatch, kSeq) == 2 * tokens * kHidden + kVocab + 2 * tokens);
  CHECK(head.backward_workspace().is_zero());
  // The loss node saves nothing now.
  CHECK(node_named(g, "loss").saves.empty());
}

TEST_CASE("fused linear cross-entropy: the chunk bound holds for Liger's chunk size") {
  // chunk_size = min(BT, next_power_of_2(ceil(BT / ceil(V / H)))); chunk * V <= 2*BT*H + V.
  const auto next_pow2 = [](int64_t x) {
    int64_t p = 1;
    while (p < x) p *= 2;
    return p;
  };
  for (int64_t tokens : {1, 7, 100, 2048, 4097, 8192, 65536}) {
    for (const auto& [hidden, vocab] : {std::pair<int64_t, int64_t>{4096, 128256}, {2048, 151936}, {896, 151936},
                                        {4096, 32000}, {8192, 128256}}) {
      const int64_t inc = (vocab + hidden - 1) / hidden;
      const int64_t chunk = std::min(tokens, next_pow2((tokens + inc - 1) / inc));
      CHECK(chunk * vocab <= 2 * tokens * hidden + vocab);
    }
  }
}

TEST_CASE("fused linear cross-entropy: a trainable head holds grad_weight in forward, in fp32 under AMP") {
  const graph::LayerGraph trainable = llama(true);
  const int64_t tokens = kBatch * kSeq;
  const int64_t chunk_and_loss = 2 * tokens * kHidden + kVocab + 2 * tokens;
  const graph::LayerGraph bf16_graph = fused(trainable);
  const graph::Node& bf16 = node_named(bf16_graph, "fused_linear_ce");
  CHECK(bf16.workspace_elements.at(kBatch, kSeq) == chunk_and_loss + kVocab * kHidden);
  // AMP: zeros_like(fp32 weight) is two 16-bit elements per weight, beside autocast's
  // cached 16-bit cast of the weight.
  const graph::LayerGraph amp_graph = fused(trainable, true);
  CHECK(node_named(amp_graph, "fused_linear_ce").workspace_elements.at(kBatch, kSeq) ==
        chunk_and_loss + 3 * kVocab * kHidden);
  // AMP over a frozen fp32 head: a 16-bit cast of the weight per chunk matmul.
  const graph::LayerGraph amp_frozen = fused(llama(false), true);
  CHECK(node_named(amp_frozen, "fused_linear_ce").workspace_elements.at(kBatch, kSeq) ==
        chunk_and_loss + kVocab * kHidden);
  // All three products run in forward: the head's FLOPs as the unfused head's.
  const graph::Node* unfused = nullptr;
  for (const graph::Node& node : trainable.nodes) {
    if (node.linear && node.linear->out_features == kVocab) unfused = &node;
  }
  REQUIRE(unfused != nullptr);
  CHECK(bf16.fwd_flops.at(kBatch, kSeq) == 3 * unfused->fwd_flops.at(kBatch, kSeq));
  CHECK(bf16.bwd_input_flops.is_zero());
  CHECK(bf16.bwd_param_flops.is_zero());
}

TEST_CASE("fused linear cross-entropy at a 128k vocabulary: below the Trainer's full loss by the logits") {
  RunSettings trainer = llama_lora(Stack::kHfTrainer);
  trainer.optimizer_impl = OptimizerImpl::kFused;
  RunSettings liger = trainer;
  liger.loss = parse_loss("fused-linear-ce");
  REQUIRE(liger.loss.has_value());
  CHECK(loss_name(*liger.loss) == "fused-linear-ce");
  const Prediction full = predict_as_given(trainer);
  const Prediction flce = predict_as_given(liger);
  MESSAGE("peak allocated: full " << full.peak_allocated / double(1 << 30) << " GiB, fused "
                                  << flce.peak_allocated / double(1 << 30) << " GiB");
  // The Trainer's loss holds the fp32 log-probabilities (4 bytes a logit) to backward,
  // where their gradient and the upcast's join them; the fused loss never holds a logit.
  CHECK(static_cast<double>(full.peak_allocated - flce.peak_allocated) >= 4.0 * 2 * 4096 * 128256);
  // Time: the same GEMMs, no fp32 logits traffic.
  CHECK(flce.time.step_ms < full.time.step_ms);
  CHECK(flce.time.step_ms > 0.9 * full.time.step_ms);
}

}  // namespace headroom::planner
