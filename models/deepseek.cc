// DeepseekV2ForCausalLM / DeepseekV3ForCausalLM (transformers 5.23.0): pre-norm
// decoder layers of multi-head latent attention and a dense or MoE MLP, with
// transformers' Python RMSNorm everywhere (DeepseekV2RMSNorm, DeepseekV3RMSNorm).
#include "models/deepseek.h"

#include <string>
#include <utility>
#include <vector>

#include "models/deepseek_moe.h"
#include "models/layers.h"
#include "models/llama.h"

namespace headroom::models {
namespace {

// The rotary tables every layer shares: V2's freqs_cis (torch.polar, complex64
// [S, d/2]: 8 bytes per pair, held here as f32 [S, d]), V3's cos and sin (the
// compute dtype, [S, d]). `second` is empty for V2.
std::pair<std::string, std::string> rope_tables(GraphBuilder& b, const DeepseekConfig& c) {
  if (c.v3) return add_rope_tables(b, "model", c.qk_rope_head_dim);
  const std::string positions = b.input("model.position_ids", SizeExpr{0, 0, 1, 0, 0, 0}, DType::kInt64, false);
  const std::string freqs = b.copy("model.rotary_emb.freqs_cis", "rope_table", {positions},
                                   SizeExpr{0, 0, c.qk_rope_head_dim, 0, 0, 0}, DType::kF32);
  return {freqs, ""};
}

// V2's apply_rotary_emb: x.float() (a new f32 tensor), times freqs_cis as
// complex64 (keeps only freqs_cis: x's factor never needs x), back to x's dtype.
std::string complex_rope(GraphBuilder& b, const std::string& prefix, const std::string& x,
                         const std::string& freqs, SizeExpr elements) {
  const std::string x32 = b.copy(prefix + ".float", "cast", {x}, elements, DType::kF32);
  OpSpec mul;
  mul.name = prefix + ".mul_freqs";
  mul.op = "mul_complex";
  mul.inputs = {x32, freqs};
  mul.out_elements = elements;
  mul.out_dtype = DType::kF32;
  mul.saves = {SavedRef{freqs, SaveWhen::kInputGrad}};
  return b.copy(prefix + ".type_as", "cast", {b.op(mul)}, elements);
}

// q = q_b_proj(q_a_layernorm(q_a_proj(x))), or q_proj(x) when q_lora_rank is null.
std::string mla_query(GraphBuilder& b, const DeepseekConfig& c, RmsNormStyle norm, const std::string& p,
                      const std::string& x) {
  const SizeExpr rows = tokens();
  const int64_t width = c.heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
  if (c.q_lora_rank == 0) return b.linear(p + ".q_proj", x, rows, c.hidden, width, false);
  const std::string qa = b.linear(p + ".q_a_proj", x, rows, c.hidden, c.q_lora_rank, c.attention_bias);
  const std::string qn = add_rms_norm(b, norm, p + ".q_a_layernorm", qa, rows, c.q_lora_rank);
  return b.linear(p + ".q_b_proj", qn, rows, c.q_lora_rank, width, false);
}

struct MlaTables {
  std::string cos_or_freqs;
  std::string sin;  // empty for V2
};

// Rotates q's and k's rope parts: V2 through complex64, V3 by real cos/sin
// (interleaved pairs or rotate_half; both keep only the tables).
std::pair<std::string, std::string> mla_rope(GraphBuilder& b, const DeepseekConfig& c, const std::string& p,
                                             const std::string& q_pe, const std::string& k_pe,
                                             const MlaTables& t) {
  const SizeExpr q_elements = times(tokens(), c.heads * c.qk_rope_head_dim);
  const SizeExpr k_elements = times(tokens(), c.qk_rope_head_dim);
  if (!c.v3) {
    return {complex_rope(b, p + ".q_rope", q_pe, t.cos_or_freqs, q_elements),
            complex_rope(b, p + ".k_rope", k_pe, t.cos_or_freqs, k_elements)};
  }
  return {apply_rope(b, p + ".q", q_pe, t.cos_or_freqs, t.sin, q_elements),
          apply_rope(b, p + ".k", k_pe, t.cos_or_freqs, t.sin, k_elements)};
}

// The attention kernel over q, k [T, heads, nope + rope] and v [T, heads, v_head],
// a slice of kv_b_proj's output `kv`: a fused kernel keeps v as given, so the
// whole of `kv` stays alive; eager's matmul keeps a contiguous copy of v alone
// (traced by scripts/exporter). Returns [T, heads * v_head].
std::string mla_core(GraphBuilder& b, const DeepseekConfig& c, const std::string& p, const std::string& q,
                     const std::string& k, const std::pair<std::string, std::string>& v_and_kv,
                     const ZooOptions& options) {
  const bool eager = options.attention == AttentionImpl::kEager;
  const std::string& v = eager ? v_and_kv.first : v_and_kv.second;
  const int64_t qk_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  // The shape's head_dim is v's: it sizes the output; the FLOPs are set below.
  const AttentionShape shape =
      self_attention_shape(c.heads, c.heads, c.v_head_dim, tokens(), square_tokens(), true);
  const EagerAttentionOptions eager_options{true, dropout_p(options, c.attention_dropout)};
  const std::string out = attention(b, options.attention, p, q, k, v, shape, eager_options);
  if (!eager) {
    graph::Node& core = b.mutable_graph().nodes.back();
    // Causal: QK^T over qk_dim and PV over v_head, half the tiles; backward 2.5x.
    const SizeExpr fwd = square_tokens().scaled(c.heads * (qk_dim + c.v_head_dim));
    core.fwd_flops = fwd;
    core.bwd_input_flops = square_tokens().scaled(c.heads * (qk_dim + c.v_head_dim) * 5 / 2);
    return out;
  }
  // Eager's QK^T runs over qk_dim channels, not v's: 2 FLOPs per channel and score.
  std::vector<graph::Node>& nodes = b.mutable_graph().nodes;
  for (auto node = nodes.rbegin(); node != nodes.rend(); ++node) {
    if (node->name != p + ".qk") continue;
    node->fwd_flops = square_tokens().scaled(2 * c.heads * qk_dim);
    node->bwd_input_flops = node->fwd_flops.scaled(2);
    break;
  }
  return b.copy(p + ".attn_output", "transpose_contiguous", {out}, times(tokens(), c.heads * c.v_head_dim));
}

// DeepseekV2Attention / DeepseekV3Attention.forward (identical but for RoPE).
std::string add_mla(GraphBuilder& b, const DeepseekConfig& c, RmsNormStyle norm, const std::string& p,
                    const std::string& x, const MlaTables& tables, const ZooOptions& options) {
  const SizeExpr rows = tokens();
  const int64_t n = c.heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, dv = c.v_head_dim;
  const std::string q = mla_query(b, c, norm, p, x);
  const auto q_parts = b.split(p + ".split_q", q, {{p + ".q_nope", times(rows, n * nope)},
                                                   {p + ".q_pe", times(rows, n * rope)}});
  const std::string ckv = b.linear(p + ".kv_a_proj_with_mqa", x, rows, c.hidden, c.kv_lora_rank + rope,
                                   c.attention_bias);
  const auto kv_parts = b.split(p + ".split_kv", ckv, {{p + ".kv_nope", times(rows, c.kv_lora_rank)},
                                                       {p + ".k_pe", times(rows, rope)}});
  const std::string latent = add_rms_norm(b, norm, p + ".kv_a_layernorm", kv_parts[0], rows, c.kv_lora_rank);
  const auto [q_rot, k_rot] = mla_rope(b, c, p, q_parts[1], kv_parts[1], tables);
  const std::string query = b.copy(p + ".query_states", "cat", {q_parts[0], q_rot}, times(rows, n * (nope + rope)));
  // expand_kv: kv_b_proj, split into k_nope and v (views), k = [k_nope, k_rot
  // broadcast to every head] written into a new tensor.
  const std::string kv = b.linear(p + ".kv_b_proj", latent, rows, c.kv_lora_rank, n * (nope + dv), false);
  const auto kvb_parts = b.split(p + ".split_kv_b", kv, {{p + ".k_nope", times(rows, n * nope)},
                                                         {p + ".value_states", times(rows, n * dv)}});
  const std::string key =
      b.copy(p + ".key_states", "cat", {kvb_parts[0], k_rot}, times(rows, n * (nope + rope)));
  const std::string attn = mla_core(b, c, p, query, key, {kvb_parts[1], kv}, options);
  return b.linear(p + ".o_proj", attn, rows, n * dv, c.hidden, c.attention_bias);
}

std::string add_decoder_layer(GraphBuilder& b, const DeepseekConfig& c, RmsNormStyle norm, int64_t i,
                              std::string hidden, const MlaTables& tables, const ZooOptions& options) {
  const std::string p = "model.layers." + std::to_string(i);
  const SizeExpr rows = tokens();
  b.begin_block(p, "deepseek_decoder", true);
  const std::string x = add_rms_norm(b, norm, p + ".input_layernorm", hidden, rows, c.hidden);
  const std::string attn = add_mla(b, c, norm, p + ".self_attn", x, tables, options);
  hidden = b.add(p + ".residual_attn", hidden, attn, times(rows, c.hidden));
  const std::string y = add_rms_norm(b, norm, p + ".post_attention_layernorm", hidden, rows, c.hidden);
  const std::string mlp = i < c.first_k_dense ? add_deepseek_mlp(b, p + ".mlp", y, c.hidden, c.intermediate)
                                              : add_deepseek_moe(b, c, p + ".mlp", y, options.expert_modules);
  return b.add(p + ".residual_mlp", hidden, mlp, times(rows, c.hidden));
}

}  // namespace

graph::LayerGraph build_deepseek(const DeepseekConfig& c, const ZooOptions& options) {
  const RmsNormStyle norm =
      options.rms_norm_f32_normalized ? RmsNormStyle::kTransformersF32 : RmsNormStyle::kTransformers;
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", tokens(), DType::kInt64, false);
  std::string hidden = b.embedding("model.embed_tokens", ids, tokens(), c.vocab, c.hidden);
  const auto [first, second] = rope_tables(b, c);
  const MlaTables tables{first, second};
  for (int64_t i = 0; i < c.layers; ++i) hidden = add_decoder_layer(b, c, norm, i, hidden, tables, options);
  add_causal_lm_head(b, "model.norm", "lm_head", hidden, c.hidden, c.vocab, norm);
  graph::LayerGraph graph = b.finish();
  graph.family = c.v3 ? "deepseek_v3" : "deepseek_v2";
  if (c.tie_embeddings) tie_parameter(graph, "lm_head.weight", "model.embed_tokens.weight");
  // PEFT has no default targets for DeepSeek (constants.py names none): the
  // attention's nn.Linear layers, as for the other MoE families.
  graph.lora_targets = {"kv_a_proj_with_mqa", "kv_b_proj", "o_proj"};
  if (c.q_lora_rank == 0) graph.lora_targets.insert(graph.lora_targets.begin(), "q_proj");
  if (c.q_lora_rank > 0) graph.lora_targets.insert(graph.lora_targets.begin(), {"q_a_proj", "q_b_proj"});
  return graph;
}

int64_t deepseek_inactive_parameters(const DeepseekConfig& c) {
  const int64_t per_expert = 3 * c.hidden * c.moe_intermediate;
  const int64_t sparse_layers = c.layers - c.first_k_dense;
  return sparse_layers * (c.routed_experts - c.top_k) * per_expert;
}

}  // namespace headroom::models
