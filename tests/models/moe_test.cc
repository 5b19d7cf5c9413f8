// Mixture-of-experts decoders read from config.json (models/moe.h,
// models/hf_moe_families.cc): the published total and active parameter counts,
// what the grouped experts keep for backward, and bad configs refused by field.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <nlohmann/json.hpp>

#include "models/hf_import.h"
#include "hf_test_model.h"
#include "saved_bytes.h"
#include "models/llama.h"
#include "models/moe.h"

namespace headroom::models {
namespace {

using testing::load_test_model;
using testing::saved_bytes_under;


// `count` is the model card's one-decimal figure in billions, rounded or cut
// (Qwen3-30B-A3B's 3,353,032,704 active parameters are "3.3B").
void check_billions(const std::string& what, int64_t count, double published) {
  const double billions = static_cast<double>(count) / 1e9;
  CHECK_MESSAGE(std::abs(billions - published) < 0.06, what, ": ", count);
}

std::string refusal(nlohmann::json config) {
  Result<graph::LayerGraph> g = graph_from_hf_config(config, "moe/config.json", ZooOptions{});
  REQUIRE_FALSE(g.is_ok());
  return g.message();
}

}  // namespace

TEST_CASE("MoE configs give the published total and active parameter counts") {
  // Active = total - the (E - k) / E of the expert weights a token does not run.
  struct Case {
    const char* folder;
    MoeSpec moe;
    double total_b;
    double active_b;
  };
  // Model cards: mistralai/Mixtral-8x7B-v0.1 (46.7B, 12.9B active, Mixtral paper
  // Jiang et al. 2024: 47B / 13B), Qwen/Qwen3-30B-A3B (30.5B, 3.3B activated),
  // Qwen/Qwen1.5-MoE-A2.7B (14.3B, 2.7B activated), allenai/OLMoE-1B-7B-0924
  // (6.9B, 1.3B active; Muennighoff et al. 2024).
  const Case cases[] = {{"mixtral-8x7b", MoeSpec{8, 2}, 46.7, 12.9},
                        {"qwen3-30b-a3b", MoeSpec{128, 8}, 30.5, 3.3},
                        {"qwen1.5-moe-a2.7b", MoeSpec{60, 4}, 14.3, 2.7},
                        {"olmoe-1b-7b", MoeSpec{64, 8}, 6.9, 1.3}};
  for (const Case& c : cases) {
    const graph::LayerGraph g = load_test_model(c.folder);
    check_billions(std::string(c.folder) + " total", g.parameter_count(), c.total_b);
    check_billions(std::string(c.folder) + " active", g.parameter_count() - inactive_expert_parameters(g, c.moe),
                   c.active_b);
  }
  // The zoo's entries are the same graphs as their config.json.
  CHECK(build_llama(kMixtral8x7b, ZooOptions{}).parameter_count() == load_test_model("mixtral-8x7b").parameter_count());
  CHECK(build_llama(kQwen3_30bA3b, ZooOptions{}).parameter_count() == load_test_model("qwen3-30b-a3b").parameter_count());
}

TEST_CASE("the grouped experts keep tokens x top_k rows, as the meta-device oracle records") {
  // Qwen3-30B-A3B dimensions, 2 layers: H 2048, E 128, k 8, expert width I 768.
  // At batch 1, seq 512: T = 512 tokens, S = T * k = 4096 routed rows.
  const graph::LayerGraph g = load_test_model("qwen3-moe-2l");
  const int64_t T = 512, S = 4096, H = 2048, E = 128, k = 8, I = 768;
  // Router: its input x (bf16, for dW), the fp32 softmax, topk's int64 indices,
  // the div_'s fp32 clone of the top values and their fp32 sums.
  const int64_t router = T * H * 2 + T * E * 4 + T * k * 8 + T * k * 4 + T * 4;
  // Experts: gathered rows [S, H] and act*up [S, I] for dW; the gate_up output
  // [S, 2I] (gate and up views) and the SiLU output [S, I]; the down output
  // [S, H] and the bf16 sorted routing weights [S] for the weighted sum; perm //
  // k, perm and inv_perm (int64 [S]) for the index ops; int32 offsets [E].
  const int64_t experts = S * H * 2 + S * I * 2 + S * 2 * I * 2 + S * I * 2 + S * H * 2 + S * 2 + 3 * S * 8 + E * 4;
  CHECK(saved_bytes_under(g, "model.layers.0.mlp.", 1, 512) == router + experts);
  // Twice the tokens, twice the bytes: nothing depends on how tokens are routed.
  CHECK(saved_bytes_under(g, "model.layers.0.mlp.", 2, 512) == 2 * (router + experts) - E * 4);
}

TEST_CASE("MoE families: shared experts, full-width q/k norms, f32 routing weights") {
  const graph::LayerGraph qwen2 = load_test_model("qwen1.5-moe-a2.7b");
  CHECK(qwen2.find_tensor("model.layers.0.mlp.shared_expert.down_proj") != nullptr);
  CHECK(qwen2.find_tensor("model.layers.0.mlp.shared_expert_sigmoid") != nullptr);
  const graph::LayerGraph olmoe = load_test_model("olmoe-1b-7b");
  CHECK(olmoe.find_tensor("model.layers.0.self_attn.q_norm") != nullptr);
  const graph::LayerGraph mixtral = load_test_model("mixtral-8x7b");
  const graph::Tensor* weighted = mixtral.find_tensor("model.layers.0.mlp.experts.weighted");
  REQUIRE(weighted != nullptr);
  CHECK(weighted->dtype == graph::DType::kF32);  // MixtralTopKRouter does not cast its weights back
  for (const graph::LayerGraph* g : {&qwen2, &olmoe, &mixtral}) {
    CHECK(g->lora_targets == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"});
  }
}

TEST_CASE("bad MoE configs are refused naming the file and the field") {
  const nlohmann::json mixtral = nlohmann::json::parse(R"({"model_type": "mixtral", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256})");
  CHECK(graph_from_hf_config(mixtral, "moe/config.json", ZooOptions{}).is_ok());
  nlohmann::json jitter = mixtral;
  jitter["router_jitter_noise"] = 0.01;
  const std::string message = refusal(jitter);
  CHECK(message.find("moe/config.json") != std::string::npos);
  CHECK(message.find("router_jitter_noise") != std::string::npos);
  nlohmann::json top_k = mixtral;
  top_k["num_experts_per_tok"] = 9;
  CHECK(refusal(top_k).find("num_experts_per_tok") != std::string::npos);
  nlohmann::json dense_layers = mixtral;
  dense_layers["model_type"] = "qwen3_moe";
  dense_layers["mlp_only_layers"] = {0};
  CHECK(refusal(dense_layers).find("mlp_only_layers") != std::string::npos);
  nlohmann::json clip = mixtral;
  clip["model_type"] = "olmoe";
  clip["clip_qkv"] = 8.0;
  CHECK(refusal(clip).find("clip_qkv") != std::string::npos);
  nlohmann::json experts = mixtral;
  experts["num_local_experts"] = 0;
  CHECK(refusal(experts).find("num_local_experts") != std::string::npos);
}

TEST_CASE("the experts' FLOPs are those of the k experts a token runs, not all E") {
  // Mixtral-8x7B: per token and layer, 2 of 8 experts, each gate_up (H -> 2I)
  // and down (I -> H): 2 x 2 x 3 x H x I multiply-adds, whatever E is.
  const graph::LayerGraph g = load_test_model("mixtral-8x7b");
  int64_t flops = 0;
  for (const graph::Node& node : g.nodes) {
    if (node.op == "grouped_mm" && node.name.starts_with("model.layers.0.")) flops += node.fwd_flops.at(1, 1);
  }
  CHECK(flops == 2 * 2 * 3 * int64_t{4096} * 14336);
}

TEST_CASE("expert parallelism in a config.json is refused by name") {
  const nlohmann::json base = nlohmann::json::parse(R"({"model_type": "qwen3_moe", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
      "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2})");
  nlohmann::json ep = base;
  ep["distributed_config"] = {{"ep_size", 4}};
  Result<graph::LayerGraph> refused = graph_from_hf_config(ep, "ep/config.json", ZooOptions{});
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("ep/config.json: distributed_config.ep_size") != std::string::npos);
  CHECK(refused.message().find("expert parallelism") != std::string::npos);
  ep["distributed_config"] = {{"ep_size", 1}};
  CHECK(graph_from_hf_config(ep, "ep/config.json", ZooOptions{}).is_ok());
}

}  // namespace headroom::models

namespace headroom::models {

TEST_CASE("tiny-moe is Mixtral's graph at toy size, with the parameters a mixtral config.json of it gives") {
  Result<graph::LayerGraph> zoo = build_zoo_model("tiny-moe", ZooOptions{});
  REQUIRE(zoo.is_ok());
  CHECK(zoo->family == "mixtral");
  // Per layer: attention 64 x (64 + 32 + 32 + 64), two norms, router 4 x 64, experts
  // 4 x (2 x 96 x 64 + 64 x 96); embeddings and head 2 x 256 x 64, the final norm.
  CHECK(zoo->parameter_count() == 4 * (12'288 + 128 + 256 + 73'728) + 32'768 + 64);
  int sparse = 0;
  for (const graph::Node& node : zoo->nodes) sparse += node.op == "grouped_mm" && node.name.ends_with(".gate_up_proj");
  CHECK(sparse == 4);
  const nlohmann::json config = {{"model_type", "mixtral"},   {"hidden_size", 64},        {"intermediate_size", 96},
                                 {"num_hidden_layers", 4},    {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                                 {"vocab_size", 256},         {"num_local_experts", 4},   {"num_experts_per_tok", 2}};
  Result<graph::LayerGraph> hf = graph_from_hf_config(config, "tiny-moe/config.json", ZooOptions{});
  REQUIRE_MESSAGE(hf.is_ok(), hf.message());
  CHECK(hf->parameter_count() == zoo->parameter_count());
  CHECK(inactive_expert_parameters(zoo.value(), kTinyMoe.moe) == 4 * 2 * (2 * 96 * 64 + 64 * 96));
}

}  // namespace headroom::models
