// DeepSeek-V2 and DeepSeek-V3 decoders (transformers 5.23.0,
// models/deepseek_v2|v3/modeling_deepseek_v2|v3.py) as LayerGraphs:
// multi-head latent attention (MLA: low-rank q and kv projections, a shared
// rotary key part), the first `first_k_dense` layers dense, the rest MoE with
// shared experts and routed experts on transformers' grouped_mm path.
// docs/models.md, "DeepSeek-V2 and V3", gives each saved tensor its source line.
#pragma once

#include <cstdint>

#include <string>

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "models/zoo.h"
#include "models/zoo_builders.h"

namespace headroom::models {

struct DeepseekConfig {
  bool v3 = false;  // DeepseekV3: sigmoid router scores, e_score_correction_bias, norm_topk_prob
  int64_t hidden = 0;
  int64_t intermediate = 0;  // the dense layers' MLP width
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t vocab = 0;
  int64_t max_position = 0;
  int64_t q_lora_rank = 0;  // 0: a plain q_proj (q_lora_rank null, as in V2-Lite)
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  bool attention_bias = false;  // q_a_proj, kv_a_proj_with_mqa, o_proj
  double attention_dropout = 0.0;
  bool rope_interleave = true;  // V3 only: the real cos/sin rotation of interleaved pairs
  int64_t moe_intermediate = 0;  // each routed and shared expert's width
  int64_t routed_experts = 0;    // n_routed_experts
  int64_t shared_experts = 1;    // n_shared_experts: one MLP of moe_intermediate x this
  int64_t top_k = 0;             // num_experts_per_tok
  int64_t first_k_dense = 0;     // first_k_dense_replace
  bool group_limited = false;    // V2 topk_method "group_limited_greedy" (V3 always groups)
  int64_t groups = 1;            // n_group
  bool norm_topk = false;        // V3's norm_topk_prob (V2's router ignores it)
  bool tie_embeddings = false;
};

// deepseek-ai/DeepSeek-V2-Lite config.json: hidden_size 2048, intermediate_size
// 10944, num_hidden_layers 27, num_attention_heads 16, vocab_size 102400,
// max_position_embeddings 163840, q_lora_rank null, kv_lora_rank 512,
// qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
// moe_intermediate_size 1408, n_routed_experts 64, n_shared_experts 2,
// num_experts_per_tok 6, first_k_dense_replace 1, topk_method "greedy".
inline constexpr DeepseekConfig kDeepseekV2Lite{
    .v3 = false, .hidden = 2048, .intermediate = 10944, .layers = 27, .heads = 16, .vocab = 102400,
    .max_position = 163840, .q_lora_rank = 0, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
    .qk_rope_head_dim = 64, .v_head_dim = 128, .attention_bias = false, .attention_dropout = 0.0,
    .rope_interleave = false, .moe_intermediate = 1408, .routed_experts = 64, .shared_experts = 2, .top_k = 6,
    .first_k_dense = 1};

struct HfFields;
// A deepseek_v2 / deepseek_v3 config.json (models/hf_deepseek.cc); errors name
// the file and the field.
Result<DeepseekConfig> read_deepseek_config(const HfFields& c, const std::string& type);
Result<graph::LayerGraph> hf_deepseek_family(const HfFields& c, const std::string& type, const ZooOptions& options);

graph::LayerGraph build_deepseek(const DeepseekConfig& config, const ZooOptions& options);

// Parameters of the routed experts a token does not run ((E - k) / E of them):
// total minus this is the active count (model cards leave the input embedding
// out of theirs: docs/models.md).
int64_t deepseek_inactive_parameters(const DeepseekConfig& config);

}  // namespace headroom::models
