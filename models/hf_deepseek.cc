// config.json reader of deepseek_v2 and deepseek_v3. Field names and defaults
// as in transformers 5.23.0's configuration_deepseek_v2.py and
// configuration_deepseek_v3.py; every field that changes what the modeling
// files build is read, or refused by name where headroom does not build it.
#include <string>

#include "models/deepseek.h"
#include "models/hf_fields.h"

namespace headroom::models {
namespace {

// first_k_dense_replace may be 0 (DeepseekV2Config's default): a count in [0, layers].
int64_t dense_layers(HfReader& r, const HfFields& c, int64_t fallback, int64_t layers) {
  if (!c.has("first_k_dense_replace")) return fallback;
  const nlohmann::json& value = c.json.at("first_k_dense_replace");
  const bool ok = value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() <= layers;
  r.check(ok, "first_k_dense_replace", "an integer from 0 to num_hidden_layers (" + std::to_string(layers) +
                                           "), got " + value.dump());
  return ok ? value.get<int64_t>() : 0;
}

// q_lora_rank: null means a plain q_proj (V2-Lite); missing means the default 1536.
int64_t q_lora_rank(HfReader& r, const HfFields& c) {
  if (c.json.contains("q_lora_rank") && c.json.at("q_lora_rank").is_null()) return 0;
  return r.positive_or("q_lora_rank", 1536);
}

// MLA's sizes and the attention fields. num_key_value_heads only feeds eager
// attention's repeat_kv over keys that already have every head: it must equal
// num_attention_heads.
void read_attention(HfReader& r, const HfFields& c, DeepseekConfig& d) {
  d.q_lora_rank = q_lora_rank(r, c);
  d.kv_lora_rank = r.positive_or("kv_lora_rank", 512);
  d.qk_nope_head_dim = r.positive_or("qk_nope_head_dim", 128);
  d.qk_rope_head_dim = r.positive_or("qk_rope_head_dim", 64);
  d.v_head_dim = r.positive_or("v_head_dim", 128);
  d.attention_bias = r.boolean_or("attention_bias", false);
  d.attention_dropout = r.probability_or("attention_dropout", 0.0);
  if (d.v3) d.rope_interleave = r.boolean_or("rope_interleave", true);
  const int64_t kv_heads = r.positive_or("num_key_value_heads", d.heads);
  r.check(kv_heads == d.heads, "num_key_value_heads",
          "num_attention_heads (" + std::to_string(d.heads) + "): MLA's keys have every head, and eager "
          "attention's repeat_kv would copy them again");
  r.check(d.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim", "an even number (RoPE rotates pairs)");
  r.at_most("qk_nope_head_dim", d.heads * (d.qk_nope_head_dim + d.qk_rope_head_dim + d.v_head_dim), kMaxHfSize,
            "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim + v_head_dim)");
}

// Routed and shared experts. V2's router: softmax, topk_method "greedy" or
// "group_limited_greedy" (anything else leaves topk_weights unset: an error in
// transformers); V3's: sigmoid, always group-limited over n_group groups,
// norm_topk_prob. num_experts_per_tok has no V2 default (None).
void read_moe(HfReader& r, DeepseekConfig& d) {
  d.moe_intermediate = r.positive_or("moe_intermediate_size", d.v3 ? 2048 : 1407);
  d.routed_experts = r.positive_or("n_routed_experts", d.v3 ? 256 : 64);
  d.shared_experts = r.positive_or("n_shared_experts", d.v3 ? 1 : 2);
  d.top_k = d.v3 ? r.positive_or("num_experts_per_tok", 8) : r.positive("num_experts_per_tok");
  r.check(d.top_k <= d.routed_experts, "num_experts_per_tok",
          "at most n_routed_experts (" + std::to_string(d.routed_experts) + "), got " + std::to_string(d.top_k));
  if (!d.v3) {
    const std::string method = r.string_or("topk_method", "greedy");
    r.check(method == "greedy" || method == "group_limited_greedy", "topk_method",
            "\"greedy\" or \"group_limited_greedy\" (DeepseekV2TopkRouter runs no other), got \"" + method + "\"");
    d.group_limited = method == "group_limited_greedy";
  }
  d.norm_topk = d.v3 && r.boolean_or("norm_topk_prob", true);
  if (!d.v3 && !d.group_limited) return;
  d.groups = d.v3 ? r.positive_or("n_group", 8) : r.positive("n_group");
  const int64_t topk_group = d.v3 ? r.positive_or("topk_group", 4) : r.positive("topk_group");
  r.divides("n_group", d.routed_experts, d.groups, "n_routed_experts");
  r.check(topk_group <= d.groups, "topk_group", "at most n_group (" + std::to_string(d.groups) + ")");
  // V3 sums each group's top-2 scores: a group needs two experts.
  if (d.v3) r.check(d.routed_experts >= 2 * d.groups, "n_group", "at most n_routed_experts / 2");
}

// Fields whose other values change what is built and that headroom does not build.
void refuse_unbuilt(HfReader& r, const HfFields& c) {
  const std::string act = r.string_or("hidden_act", "silu");
  r.check(act == "silu", "hidden_act", "\"silu\" (the SwiGLU experts and MLPs headroom builds), got \"" + act + "\"");
  if (c.json.contains("model_type") && c.json.at("model_type") == "deepseek_v2") {
    r.check(!r.boolean_or("mlp_bias", false), "mlp_bias", "false (MLP biases are not built)");
  }
}

}  // namespace

Result<DeepseekConfig> read_deepseek_config(const HfFields& c, const std::string& type) {
  HfReader r(c);
  DeepseekConfig d;
  d.v3 = type == "deepseek_v3";
  d.hidden = r.positive("hidden_size");
  d.intermediate = r.positive_or("intermediate_size", d.v3 ? 18432 : 11008);
  d.layers = r.layers("num_hidden_layers");
  d.heads = r.positive("num_attention_heads");
  d.vocab = r.positive("vocab_size");
  d.max_position = r.positive_or("max_position_embeddings", d.v3 ? 4096 : 2048);
  d.tie_embeddings = r.boolean_or("tie_word_embeddings", false);
  read_attention(r, c, d);
  read_moe(r, d);
  d.first_k_dense = dense_layers(r, c, d.v3 ? 3 : 0, d.layers);
  refuse_unbuilt(r, c);
  if (!r.status().is_ok()) return r.status();
  return d;
}

Result<graph::LayerGraph> hf_deepseek_family(const HfFields& c, const std::string& type, const ZooOptions& options) {
  Result<DeepseekConfig> read = read_deepseek_config(c, type);
  if (!read.is_ok()) return read.status();
  graph::LayerGraph graph = build_deepseek(read.value(), options);
  set_token_sequence(graph, read->max_position);
  return graph;
}

}  // namespace headroom::models
