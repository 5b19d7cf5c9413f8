// DeepSeek-V2 and V3 read from config.json (models/deepseek.h,
// models/hf_deepseek.cc): the published parameter counts, what multi-head latent
// attention and the float32 routers keep for backward (the meta-device oracle's
// deepseek rows agree within 0.4%: docs/models.md), the attention FLOPs, and bad
// configs refused naming the file and the field.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <nlohmann/json.hpp>

#include "models/deepseek.h"
#include "models/hf_fields.h"
#include "models/hf_import.h"
#include "hf_test_model.h"
#include "saved_bytes.h"

namespace headroom::models {
namespace {

using testing::load_test_model;
using testing::saved_bytes_under;

const std::string kData = testing::hf_data_dir();


DeepseekConfig read(const std::string& name) {
  const nlohmann::json json = nlohmann::json::parse(std::ifstream(kData + name + "/config.json"));
  const HfFields fields{json, "config.json", ""};
  Result<DeepseekConfig> config = read_deepseek_config(fields, json.at("model_type").get<std::string>());
  REQUIRE_MESSAGE(config.is_ok(), config.message());
  return config.value();
}

std::string refusal(const nlohmann::json& config) {
  Result<graph::LayerGraph> g = graph_from_hf_config(config, "ds/config.json", ZooOptions{});
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.message().find("ds/config.json") != std::string::npos);
  return g.message();
}

}  // namespace

TEST_CASE("DeepSeek configs give the published total and active parameter counts") {
  // deepseek-ai/DeepSeek-V2-Lite model card: 15.7B total, 2.4B activated;
  // deepseek-ai/DeepSeek-V3 model card: 671B total (the 14B multi-token-prediction
  // module apart: transformers 5.23.0 does not build it), 37B activated. Both
  // "activated" counts leave the input embedding out: 2,447,000,000 and 36.5B
  // here, against 2.66B and 37.4B with it.
  const graph::LayerGraph lite = load_test_model("deepseek-v2-lite");
  const DeepseekConfig lite_config = read("deepseek-v2-lite");
  const int64_t lite_embedding = 102400 * 2048;
  CHECK(lite.parameter_count() == 15'706'484'224);
  const int64_t lite_active = lite.parameter_count() - deepseek_inactive_parameters(lite_config) - lite_embedding;
  CHECK(std::abs(static_cast<double>(lite_active) / 1e9 - 2.4) < 0.06);
  const graph::LayerGraph v3 = load_test_model("deepseek-v3");
  const DeepseekConfig v3_config = read("deepseek-v3");
  CHECK(std::abs(static_cast<double>(v3.parameter_count()) / 1e9 - 671.0) < 0.5);
  const int64_t v3_active = v3.parameter_count() - deepseek_inactive_parameters(v3_config) - int64_t{129280} * 7168;
  CHECK(std::abs(static_cast<double>(v3_active) / 1e9 - 37.0) < 0.5);
  // The zoo's entry is the same graph as the published config.json.
  CHECK(build_deepseek(kDeepseekV2Lite, ZooOptions{}).parameter_count() == lite.parameter_count());
}

TEST_CASE("MLA keeps the latent, the expanded q and k, all of kv_b_proj's output, and no per-token RoPE") {
  // DeepSeek-V2-Lite layer 0 at batch 1, seq 512: T 512, H 2048, 16 heads,
  // qk 128 + 64, v 128, kv_lora_rank 512, q_lora_rank null (q_proj).
  const graph::LayerGraph g = load_test_model("deepseek-v2-lite-2l");
  const int64_t T = 512, H = 2048, n = 16, qk = 192, dv = 128, r = 512, rope = 64;
  const int64_t projections_input = T * H * 2;               // q_proj and kv_a_proj_with_mqa share x
  const int64_t latent_norm = T * r * 4 + T * 4 + T * r * 2;  // kv_a_layernorm: f32 x, rstd, normalized
  const int64_t latent = T * r * 2;                          // kv_b_proj's input
  const int64_t freqs = T * rope / 2 * 8;                    // complex64 freqs_cis [S, 32], all layers share it
  // SDPA (memory-efficient: v's width differs): q, k, v = a slice of kv_b_proj's
  // [T, 16 x 256] output (the whole storage stays), out, the f32 logsumexp.
  const int64_t attention = T * n * qk * 2 * 2 + T * n * (128 + dv) * 2 + T * n * dv * 2 + T * n * 4;
  CHECK(saved_bytes_under(g, "model.layers.0.self_attn.", 1, 512) ==
        projections_input + latent_norm + latent + freqs + attention);
}

TEST_CASE("the DeepSeek routers keep an f32 copy of x and their f32 scores") {
  // V3's router (2-layer V3, layer 1): x.float() [T, 7168] for dW, weight.float()
  // [256, 7168] for dx, sigmoid's f32 output, gather's int64 indices, the clone
  // and the f32 sums of norm_topk_prob's in-place division.
  const int64_t T = 512, H = 7168, E = 256, k = 8;
  const graph::LayerGraph v3 = load_test_model("deepseek-v3-2l");
  CHECK(saved_bytes_under(v3, "model.layers.1.mlp.gate", 1, 512) ==
        T * H * 4 + E * H * 4 + T * E * 4 + T * k * 8 + T * k * 4 + T * 4);
  // V2's (V2-Lite, layer 1): softmax's f32 output and topk's indices instead.
  const graph::LayerGraph v2 = load_test_model("deepseek-v2-lite-2l");
  CHECK(saved_bytes_under(v2, "model.layers.1.mlp.gate", 1, 512) ==
        T * 2048 * 4 + 64 * 2048 * 4 + T * 64 * 4 + T * 6 * 8);
  // The first first_k_dense_replace layers are dense; shared experts are nn.Linear.
  CHECK(v2.find_tensor("model.layers.0.mlp.down_proj") != nullptr);
  CHECK(v2.find_tensor("model.layers.0.mlp.gate") == nullptr);
  CHECK(v2.find_tensor("model.layers.1.mlp.shared_experts.down_proj") != nullptr);
}

TEST_CASE("MLA's attention FLOPs use q and k's 192 and v's 128 channels") {
  // Causal forward per head: QK^T over 192 and PV over 128 channels, 2 FLOPs a
  // multiply-add, half the S x S tiles: S^2 x (192 + 128); backward 2.5x.
  const graph::LayerGraph g = load_test_model("deepseek-v2-lite-2l");
  const graph::Node* sdpa = nullptr;
  for (const graph::Node& node : g.nodes) {
    if (node.name == "model.layers.0.self_attn.sdpa") sdpa = &node;
  }
  REQUIRE(sdpa != nullptr);
  CHECK(sdpa->fwd_flops.at(1, 512) == int64_t{512} * 512 * 16 * (192 + 128));
  CHECK(sdpa->bwd_input_flops.at(1, 512) == int64_t{512} * 512 * 16 * (192 + 128) * 5 / 2);
  // Eager multiplies the whole S x S square: QK^T at 2 x 192 per score and head.
  ZooOptions eager;
  eager.attention = AttentionImpl::kEager;
  Result<HfModel> eager_model = load_hf_model(kData + "deepseek-v2-lite-2l", eager);
  REQUIRE(eager_model.is_ok());
  for (const graph::Node& node : eager_model->graph.nodes) {
    if (node.name == "model.layers.0.self_attn.qk") CHECK(node.fwd_flops.at(1, 512) == int64_t{512} * 512 * 16 * 2 * 192);
  }
  // The routed experts: 6 of 64 per token, gate_up (H -> 2 x 1408) and down.
  int64_t expert_flops = 0;
  for (const graph::Node& node : g.nodes) {
    if (node.op == "grouped_mm" && node.name.starts_with("model.layers.1.")) expert_flops += node.fwd_flops.at(1, 1);
  }
  CHECK(expert_flops == 6 * 2 * 3 * int64_t{2048} * 1408);
}

TEST_CASE("a DeepSeek token's matmul FLOPs are twice its active matmul weights") {
  // Per token every matmul runs 2 FLOPs per weight it touches: MLA's low-rank
  // projections, the dense MLP, the router, the 6 routed and 2 shared experts of
  // each sparse layer, lm_head. That is 2 x the active count less the input
  // embedding (a lookup) and the RMSNorm weights (27 x (2 x 2048 + 512) + 2048).
  const graph::LayerGraph g = load_test_model("deepseek-v2-lite");
  const DeepseekConfig c = read("deepseek-v2-lite");
  int64_t flops = 0;
  for (const graph::Node& node : g.nodes) {
    if (node.op == "linear" || node.op == "router_linear" || node.op == "grouped_mm") flops += node.fwd_flops.at(1, 1);
  }
  const int64_t norms = 27 * (2 * 2048 + 512) + 2048;
  const int64_t active = g.parameter_count() - deepseek_inactive_parameters(c) - int64_t{102400} * 2048 - norms;
  CHECK(flops == 2 * active);
}

TEST_CASE("bad DeepSeek configs are refused naming the file and the field") {
  const nlohmann::json v2 = nlohmann::json::parse(R"({"model_type": "deepseek_v2", "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256, "num_experts_per_tok": 2,
      "n_routed_experts": 8, "q_lora_rank": null, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
      "qk_rope_head_dim": 8, "v_head_dim": 8, "moe_intermediate_size": 32, "first_k_dense_replace": 1})");
  CHECK(graph_from_hf_config(v2, "ds/config.json", ZooOptions{}).is_ok());
  nlohmann::json no_k = v2;
  no_k.erase("num_experts_per_tok");  // DeepseekV2Config's default is None
  CHECK(refusal(no_k).find("num_experts_per_tok") != std::string::npos);
  nlohmann::json method = v2;
  method["topk_method"] = "noaux_tc";
  CHECK(refusal(method).find("topk_method") != std::string::npos);
  nlohmann::json kv_heads = v2;
  kv_heads["num_key_value_heads"] = 2;
  CHECK(refusal(kv_heads).find("num_key_value_heads") != std::string::npos);
  nlohmann::json dense = v2;
  dense["first_k_dense_replace"] = 3;
  CHECK(refusal(dense).find("first_k_dense_replace") != std::string::npos);
  nlohmann::json groups = v2;
  groups["topk_method"] = "group_limited_greedy";
  groups["n_group"] = 3;
  groups["topk_group"] = 1;
  CHECK(refusal(groups).find("n_group") != std::string::npos);
  nlohmann::json act = v2;
  act["hidden_act"] = "gelu";
  CHECK(refusal(act).find("hidden_act") != std::string::npos);
  nlohmann::json rope = v2;
  rope["qk_rope_head_dim"] = 7;
  CHECK(refusal(rope).find("qk_rope_head_dim") != std::string::npos);
  // From "architectures" when model_type is missing.
  nlohmann::json v3 = v2;
  v3.erase("model_type");
  v3["architectures"] = {"DeepseekV3ForCausalLM"};
  v3["n_group"] = 2;
  v3["topk_group"] = 1;
  Result<graph::LayerGraph> g = graph_from_hf_config(v3, "ds/config.json", ZooOptions{});
  REQUIRE_MESSAGE(g.is_ok(), g.message());
  CHECK(g->family == "deepseek_v3");
}

}  // namespace headroom::models
