// Mixture-of-experts decoders in transformers 4.x's layout (models/moe_loop.h):
// one nn.Linear per expert projection, a Python loop over the experts, each
// expert's tensors at the balanced tokens x k / E rows.
#include <doctest/doctest.h>

#include <string>

#include "models/hf_import.h"
#include "models/llama.h"
#include "models/moe.h"
#include "models/moe_loop.h"
#include "hf_test_model.h"
#include "saved_bytes.h"

namespace headroom::models {
namespace {

using testing::load_test_model;
using testing::saved_bytes_under;

graph::LayerGraph load(const std::string& name, bool expert_modules) {
  ZooOptions options;
  options.expert_modules = expert_modules;
  return load_test_model(name, options);
}

const graph::Node* find_node(const graph::LayerGraph& g, const std::string& name) {
  for (const graph::Node& node : g.nodes) {
    if (node.name == name) return &node;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("the 4.x expert layout has the fused layout's parameters, as per-expert Linears") {
  for (const char* folder : {"mixtral-8x7b", "qwen1.5-moe-a2.7b", "olmoe-1b-7b", "qwen2-moe-2l"}) {
    const graph::LayerGraph fused = load(folder, false);
    const graph::LayerGraph loop = load(folder, true);
    CHECK_MESSAGE(loop.parameter_count() == fused.parameter_count(), folder);
    const MoeSpec any{1, 1};  // inactive_expert_parameters reads E and k from its spec
    CHECK(inactive_expert_parameters(loop, any) == inactive_expert_parameters(fused, any));
  }
  // The zoo's Mixtral too, under ZooOptions::expert_modules.
  ZooOptions options;
  options.expert_modules = true;
  CHECK(build_llama(kMixtral8x7b, options).parameter_count() == load("mixtral-8x7b", false).parameter_count());
}

TEST_CASE("4.x names: Mixtral's block_sparse_moe with w1 w3 w2, Qwen2-MoE's gate_proj and shared expert") {
  const graph::LayerGraph mixtral = load("mixtral-2l", true);
  const graph::Node* w1 = find_node(mixtral, "model.layers.1.block_sparse_moe.experts.7.w1");
  REQUIRE(w1 != nullptr);
  CHECK(w1->op == "linear");
  CHECK(w1->params.front().shape == std::vector<int64_t>{14336, 4096});
  const graph::Node* gate = find_node(mixtral, "model.layers.0.block_sparse_moe.gate");
  REQUIRE(gate != nullptr);
  CHECK(gate->op == "linear");  // an nn.Linear before 5.0: bitsandbytes and PEFT see it
  CHECK(find_node(mixtral, "model.layers.0.block_sparse_moe.experts.0.w2") != nullptr);
  CHECK(find_node(mixtral, "model.layers.0.block_sparse_moe.experts.8.w1") == nullptr);
  CHECK(is_expert_linear("model.layers.0.block_sparse_moe.experts.3.w3"));
  CHECK_FALSE(is_expert_linear("model.layers.0.mlp.shared_expert.up_proj"));
  CHECK(is_expert_linear("model.layers.7.mlp.experts.127.down_proj"));
  CHECK_FALSE(is_expert_linear("experts.3.w1"));                        // no prefix before "experts"
  CHECK_FALSE(is_expert_linear("model.layers.0.mlp.experts.x.w1"));     // the index is a number
  CHECK_FALSE(is_expert_linear("model.layers.0.mlp.experts.3.w1.lora_A"));  // a LoRA factor, not the Linear
  CHECK_FALSE(is_expert_linear("model.layers.0.mlp.my_experts.3.w1"));  // the module is "experts"
  const graph::LayerGraph qwen2 = load("qwen2-moe-2l", true);
  CHECK(find_node(qwen2, "model.layers.0.mlp.experts.59.down_proj") != nullptr);
  CHECK(find_node(qwen2, "model.layers.0.mlp.shared_expert.down_proj") != nullptr);
  CHECK(find_node(qwen2, "model.layers.0.mlp.shared_expert_gate") != nullptr);
  for (const graph::Node& node : qwen2.nodes) CHECK(node.op != "grouped_mm");
}

TEST_CASE("each expert keeps its balanced share of tokens x k rows, and the loop's indices") {
  // Mixtral-8x7B dimensions, 2 layers: H 4096, E 8, k 2, expert width I 14336.
  // At batch 1, seq 512: T = 512, n = T * k / E = 128 rows per expert.
  const graph::LayerGraph g = load("mixtral-2l", true);
  const int64_t T = 512, H = 4096, E = 8, k = 2, I = 14336, n = 128;
  // One expert, everything trainable: the routed rows [n, H] for w1 and w3's dW,
  // w1's output (SiLU's input) and SiLU's and w3's outputs (the product's), the
  // product [n, I] for w2's dW, w2's output [n, H] and the gathered weights [n]
  // (the weighted product), the weighted output [n, H] (index_add_'s source: its
  // backward formula takes it), where's int64 [n, 2] (the index ops, index_add_).
  const int64_t expert = n * H * 2 + 3 * n * I * 2 + n * I * 2 + n * H * 2 + n * 2 + n * H * 2 + n * 2 * 8;
  CHECK(saved_bytes_under(g, "model.layers.0.block_sparse_moe.experts.3.", 1, 512) == expert);
  // Router: x for the gate's dW, the fp32 softmax, topk's indices, the in-place
  // division's fp32 clone of the top values and the sums.
  const int64_t router = T * H * 2 + T * E * 4 + T * k * 8 + T * k * 4 + T * 4;
  CHECK(saved_bytes_under(g, "model.layers.0.block_sparse_moe.gate", 1, 512) == router);
  // All experts together hold tokens x k rows: E experts of n each.
  CHECK(saved_bytes_under(g, "model.layers.0.block_sparse_moe.experts.", 1, 512) == E * expert);
}

TEST_CASE("an uneven share is rounded up per expert, never below tokens x k rows in all") {
  // Qwen1.5-MoE: 60 experts, top-4, at 512 tokens: 2048 routed rows, 34.13 per expert.
  const graph::LayerGraph g = load("qwen2-moe-2l", true);
  const graph::Tensor* where = g.find_tensor("model.layers.0.mlp.experts.0.where");
  REQUIRE(where != nullptr);
  CHECK(where->elements.at(1, 512) == 69);  // ceil(2 * 2048 / 60)
  CHECK(where->elements.at(2, 2048) == 2 * (2 * 2048 * 4) / 60 + 1);
  int64_t rows = 0;
  for (int j = 0; j < 60; ++j) {
    rows += g.find_tensor("model.layers.0.mlp.experts." + std::to_string(j) + ".routing_weight")->elements.at(1, 512);
  }
  CHECK(rows >= 2048);
  CHECK(rows < 2048 + 60);
}

}  // namespace headroom::models
