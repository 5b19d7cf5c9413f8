// config.json readers of the mixture-of-experts decoders: mixtral, qwen2_moe,
// qwen3_moe and olmoe. Field names and defaults as in transformers 5.23.0's
// configuration_<family>.py; the attention part is each family's dense
// sibling's (mistral, qwen2, qwen3, llama with OLMoE's full-width q/k norms).
#include <string>

#include "models/hf_fields.h"
#include "models/llama.h"
#include "models/moe.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// The dense family whose attention, norms and defaults each MoE family shares.
std::string dense_sibling(const std::string& type) {
  if (type == "mixtral") return "mistral";
  if (type == "qwen2_moe") return "qwen2";
  if (type == "qwen3_moe") return "qwen3";
  return "llama";  // olmoe
}

// mlp_only_layers (Qwen2/3-MoE): published configs leave it empty; a list would
// make chosen layers dense, which headroom does not build.
void refuse_mlp_only_layers(HfReader& r, const HfFields& c) {
  if (!c.has("mlp_only_layers") || c.json.at("mlp_only_layers").is_null()) return;
  const nlohmann::json& layers = c.json.at("mlp_only_layers");
  r.check(layers.is_array() && layers.empty(), "mlp_only_layers",
          "an empty list (dense layers chosen by index are not built; decoder_sparse_step is)");
}

// MixtralConfig: num_local_experts 8, num_experts_per_tok 2, experts of
// intermediate_size, always renormalized, router_jitter_noise 0. Qwen2MoeConfig:
// num_experts 60, num_experts_per_tok 4, moe_intermediate_size 1408,
// shared_expert_intermediate_size 5632, decoder_sparse_step 1, norm_topk_prob
// false. Qwen3MoeConfig: num_experts 128, num_experts_per_tok 8,
// moe_intermediate_size 768, decoder_sparse_step 1, norm_topk_prob true.
// OlmoeConfig: num_experts 64, num_experts_per_tok 8, experts of
// intermediate_size, norm_topk_prob false.
MoeSpec read_moe(HfReader& r, const HfFields& c, const std::string& type, int64_t intermediate) {
  MoeSpec m;
  if (type == "mixtral") {
    m.experts = r.positive_or("num_local_experts", 8);
    m.top_k = r.positive_or("num_experts_per_tok", 2);
    m.expert_intermediate = intermediate;
    m.norm_topk = true;
    m.f32_routing_weights = true;
    m.mixtral_names = true;
    // MixtralSparseMoeBlock multiplies the hidden state in place by uniform noise in training.
    const bool jitter = c.has("router_jitter_noise") && !(c.json.at("router_jitter_noise").is_number() &&
                                                           c.json.at("router_jitter_noise").get<double>() == 0.0);
    r.check(!jitter, "router_jitter_noise", "0 (the in-place jitter noise in training is not built)");
  } else {
    const bool qwen2 = type == "qwen2_moe";
    const bool qwen3 = type == "qwen3_moe";
    m.experts = r.positive_or("num_experts", qwen2 ? 60 : qwen3 ? 128 : 64);
    m.top_k = r.positive_or("num_experts_per_tok", qwen2 ? 4 : 8);
    m.expert_intermediate = type == "olmoe" ? intermediate : r.positive_or("moe_intermediate_size", qwen2 ? 1408 : 768);
    m.norm_topk = r.boolean_or("norm_topk_prob", qwen3);
    if (qwen2) m.shared_intermediate = r.positive_or("shared_expert_intermediate_size", 5632);
    if (qwen2 || qwen3) {
      m.sparse_step = r.positive_or("decoder_sparse_step", 1);
      refuse_mlp_only_layers(r, c);
    }
  }
  r.check(m.top_k <= m.experts, "num_experts_per_tok",
          "at most the number of experts (" + std::to_string(m.experts) + "), got " + std::to_string(m.top_k));
  return m;
}

// transformers 5.x's DistributedConfig (config.json "distributed_config"):
// ep_size > 1 (or the older enable_expert_parallel) places whole experts on
// different ranks, whose all-to-all dispatch and per-rank expert share are not
// modelled; ZeRO-3/FSDP shard experts like any other parameter and are.
void refuse_expert_parallelism(HfReader& r, const HfFields& c) {
  if (!c.has("distributed_config") || !c.json.at("distributed_config").is_object()) return;
  const nlohmann::json& d = c.json.at("distributed_config");
  const bool ep_size = d.contains("ep_size") && d.at("ep_size").is_number_integer() && d.at("ep_size").get<int64_t>() > 1;
  const bool enabled = d.contains("enable_expert_parallel") && d.at("enable_expert_parallel") == true;
  if (ep_size || enabled) {
    r.fail(unsupported_field(c.origin, c.name("distributed_config") + (ep_size ? ".ep_size" : ".enable_expert_parallel"),
                             "no expert parallelism (ep_size 1): expert parallelism, experts on different ranks with "
                             "an all-to-all dispatch, is not modelled; ZeRO-3 or FSDP shards the experts like any "
                             "parameter (--zero 3)"));
  }
}

}  // namespace

Result<graph::LayerGraph> hf_moe_family(const HfFields& c, const std::string& type, const ZooOptions& options) {
  Result<LlamaConfig> read = read_llama_config(c, dense_sibling(type));
  if (!read.is_ok()) return read.status();
  LlamaConfig config = read.value();
  HfReader r(c);
  config.moe = read_moe(r, c, type, config.intermediate);
  // Mixtral kept its own cached rotary module after Mistral's moved to per-forward tables.
  if (type == "mixtral") config.rope_cache = kMixtralRope;
  refuse_expert_parallelism(r, c);
  if (type == "qwen2_moe") config.qkv_bias = r.boolean_or("qkv_bias", true);
  if (type == "olmoe") {
    config.qk_norm_full_width = true;
    // OlmoeAttention clamps q, k, v in place when clip_qkv is set; the OLMoE checkpoints leave it null.
    r.check(!c.has("clip_qkv") || c.json.at("clip_qkv").is_null(), "clip_qkv",
            "null (the in-place clamp of q, k, v is not built)");
  }
  if (type == "qwen2_moe" || type == "qwen3_moe") {
    config.max_position = r.positive_or("max_position_embeddings", 32768);
  } else if (type == "olmoe") {
    config.max_position = r.positive_or("max_position_embeddings", 4096);
  }
  if (!r.status().is_ok()) return r.status();
  graph::LayerGraph graph = build_llama(config, options);
  graph.family = type;
  set_token_sequence(graph, config.max_position);
  // In 5.x the experts are 3-D nn.Parameters, not nn.Linear: PEFT cannot target them
  // by module name, so the default targets are the attention projections (kept under
  // 4.x's expert Linears too, models/moe_loop.h: one default for either layout).
  graph.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  return graph;
}

}  // namespace headroom::models
