// DeepSeek-V2 and V3 in transformers 4.x's layout (models/deepseek_moe.h,
// models/deepseek_moe_loop.cc, models/moe_loop.h; transformers 4.57.6
// DeepseekV2MoE.moe and DeepseekV3MoE.moe): the same parameters as the fused
// layout, each expert its own nn.Linear modules, and what each loop keeps.
#include <doctest/doctest.h>

#include <string>

#include "graph/dtype.h"
#include "hf_test_model.h"
#include "models/zoo.h"
#include "saved_bytes.h"

namespace headroom::models {
namespace {

using testing::load_test_model;

ZooOptions modules() {
  ZooOptions options;
  options.expert_modules = true;
  return options;
}

int64_t saved_by(const graph::LayerGraph& g, const std::string& node, int64_t batch, int64_t seq) {
  return testing::saved_bytes_of(g, [&node](const graph::Node& n) { return n.name == node; }, batch, seq);
}

}  // namespace

TEST_CASE("DeepSeek's experts as modules hold the same parameters as the fused experts") {
  // deepseek-ai/DeepSeek-V2-Lite: 15,706,484,224 whichever way transformers lays the experts out.
  const graph::LayerGraph lite = load_test_model("deepseek-v2-lite", modules());
  CHECK(lite.parameter_count() == 15'706'484'224);
  CHECK(load_test_model("deepseek-v3-2l", modules()).parameter_count() ==
        load_test_model("deepseek-v3-2l").parameter_count());
  // Each routed expert is a DeepseekV2MLP of nn.Linear modules: gate, up, down.
  const graph::LayerGraph v2 = load_test_model("deepseek-v2-lite-2l", modules());
  for (const char* linear : {"gate_proj", "up_proj", "down_proj"}) {
    const std::string name = std::string("model.layers.1.mlp.experts.63.") + linear;
    CHECK_MESSAGE(v2.find_tensor(name) != nullptr, name);
  }
  CHECK(v2.find_tensor("model.layers.1.mlp.experts.gate_up_proj") == nullptr);
}

TEST_CASE("DeepSeek-V2's 4.x loop keeps the sort's indices and a float32 clone of the weighted rows") {
  // DeepseekV2MoE.moe (4.57.6), V2-Lite layer 1 at batch 1, seq 512: T*k = 3072 pairs.
  const graph::LayerGraph g = load_test_model("deepseek-v2-lite-2l", modules());
  const int64_t pairs = 512 * 6, H = 2048;
  const std::string p = "model.layers.1.mlp.";
  CHECK(saved_by(g, p + "sorted_tokens", 1, 512) == pairs * 8);  // hidden_states[indices // k]: the index
  CHECK(saved_by(g, p + "new_x", 1, 512) == pairs * 8);          // new_x[indices] = outs: the index
  // .type(f32).mul_(topk_weight): the clone of its f32 input (for topk_weight's
  // gradient) and topk_weight itself, [T, k] f32.
  CHECK(saved_by(g, p + "weighted", 1, 512) == pairs * H * 4 + pairs * 4);
  // Each expert runs over its balanced share of the sorted rows: 3072 / 64 = 48.
  const graph::Tensor* rows = g.find_tensor(p + "experts.7.rows");
  REQUIRE(rows != nullptr);
  CHECK(rows->elements.at(1, 512) == 48 * H);
}

TEST_CASE("DeepSeek-V3's 4.x loop weighs and accumulates in the routing weights' compute dtype") {
  // DeepseekV3MoE.moe (4.57.6): zeros_like(hidden_states, dtype=topk_weights.dtype),
  // expert_output * expert_weights, index_add_. Under the Trainer's bf16 autocast the
  // router's F.linear, hence the weights, are bf16 (the oracle: mul (16, 7168) bf16 per expert).
  const graph::LayerGraph g = load_test_model("deepseek-v3-2l", modules());
  const std::string p = "model.layers.1.mlp.";
  const int64_t T = 512, H = 7168, E = 256, k = 8;
  const graph::Tensor* accumulator = g.find_tensor(p + "final_hidden_states");
  REQUIRE(accumulator != nullptr);
  CHECK(accumulator->dtype.value_or(graph::DType::kBF16) == graph::DType::kBF16);
  // mul keeps the expert's output and its weights; one torch.where per expert.
  const int64_t rows = T * k / E;  // 16
  CHECK(saved_by(g, p + "experts.0.weighted", 1, 512) == rows * H * 2 + rows * 2);
  CHECK(g.find_tensor(p + "experts.255.where") != nullptr);
}

}  // namespace headroom::models
