// Llama 3 / Mistral (HF LlamaForCausalLM, MistralForCausalLM) and the original
// Qwen (QWenLMHeadModel, trust_remote_code modeling_qwen.py). Pre-norm decoder
// layers: RMSNorm, attention with RoPE, residual, RMSNorm, SwiGLU MLP, residual.
#include "models/llama.h"

#include <string>

#include "graph/op_traits.h"
#include "models/layers.h"

namespace headroom::models {
namespace {

std::string layer_prefix(const std::string& prefix, int64_t i) {
  return prefix + ".layers." + std::to_string(i);
}

// Attention core shared by Llama and Qwen: RoPE on q and k, then attention.
// Eager: HF repeat_kv copies k and v up to all heads before the matmuls, and
// the [B, H, S, D] output is made contiguous as [B, S, H*D] before o_proj.
// SDPA/flash take the grouped k, v as they are (transformers >= 4.54: enable_gqa),
// or the copies (`repeat_kv`: before 4.54), and their output is already
// [B, S, H, D] in memory, so .transpose(1, 2).contiguous() is a no-op.
struct RopeAttention {
  std::string prefix;  // e.g. "model.layers.3.self_attn"
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  bool softmax_fp32 = true;
  double dropout = 0.0;
  // Phi3's fused qkv_proj output, of which v is a view. Flash/SDPA keeps v as
  // given, a view, so the whole qkv storage stays alive until backward (traced
  // by scripts/exporter); eager attention's matmul keeps a contiguous copy of v.
  std::string v_base;
  int64_t sliding_window = 0;  // LlamaConfig::sliding_window
};

std::string rope_attention(GraphBuilder& b, const RopeAttention& a, const std::string& q,
                           const std::string& k, const std::string& v, const std::string& cos,
                           const std::string& sin, AttentionImpl impl, bool repeat_kv) {
  const SizeExpr q_elements = times(tokens(), a.heads * a.head_dim);
  const SizeExpr kv_elements = times(tokens(), a.kv_heads * a.head_dim);
  const std::string q_rope = apply_rope(b, a.prefix + ".q", q, cos, sin, q_elements);
  std::string k_rope = apply_rope(b, a.prefix + ".k", k, cos, sin, kv_elements);
  std::string v_in = impl != AttentionImpl::kEager && !a.v_base.empty() ? a.v_base : v;
  int64_t kv_heads = a.kv_heads;
  if ((impl == AttentionImpl::kEager || repeat_kv) && a.kv_heads != a.heads) {
    k_rope = b.copy(a.prefix + ".repeat_kv_k", std::string(graph::op::kRepeatKv), {k_rope}, q_elements);
    v_in = b.copy(a.prefix + ".repeat_kv_v", std::string(graph::op::kRepeatKv), {v}, q_elements);
    kv_heads = a.heads;
  }
  AttentionShape shape =
      self_attention_shape(a.heads, kv_heads, a.head_dim, tokens(), square_tokens(), true);
  shape.sliding_window = a.sliding_window;
  const EagerAttentionOptions eager{a.softmax_fp32, a.dropout};
  const std::string out = attention(b, impl, a.prefix, q_rope, k_rope, v_in, shape, eager);
  if (impl != AttentionImpl::kEager) return out;
  return b.copy(a.prefix + ".attn_output", "transpose_contiguous", {out}, q_elements);
}

// The MLP of decoder layer `layer`: the MoE block where c.moe makes it sparse,
// else SwiGLU/GeGLU over gate_proj and up_proj (or Phi3's fused gate_up_proj).
std::string add_decoder_mlp(GraphBuilder& b, const LlamaConfig& c, const std::string& p, const std::string& y,
                            int64_t layer) {
  if (is_sparse_layer(c.moe, layer)) return add_moe_block(b, c.moe, c.hidden, p + "." + moe_module_name(c.moe), y);
  const SizeExpr rows = tokens();
  const SizeExpr ffn_elements = times(rows, c.intermediate);
  std::string gate, up;
  if (c.fused_projections) {
    // Phi3MLP: gate_up_proj, chunked in two.
    const std::string gate_up = b.linear(p + ".mlp.gate_up_proj", y, rows, c.hidden, 2 * c.intermediate, false);
    const auto parts = b.split(p + ".mlp.chunk", gate_up, {{p + ".mlp.gate", ffn_elements}, {p + ".mlp.up", ffn_elements}});
    gate = parts[0];
    up = parts[1];
  } else {
    gate = b.linear(p + ".mlp.gate_proj", y, rows, c.hidden, c.intermediate, false);
    up = b.linear(p + ".mlp.up_proj", y, rows, c.hidden, c.intermediate, false);
  }
  const std::string act = b.activation(p + ".mlp.act_fn", gate, ffn_elements, c.mlp_activation);
  const std::string prod = b.mul(p + ".mlp.act_mul_up", act, up, ffn_elements);
  const std::string down = b.linear(p + ".mlp.down_proj", prod, rows, c.intermediate, c.hidden, false);
  // LlamaMLP.forward(x) holds its argument until down_proj returns, and the decoder
  // layer's hidden_states name holds it until the MLP returns (transformers 5.23.0
  // modeling_llama.py; Phi3MLP, Qwen2MLP and MistralMLP alike): live at the MLP's peak
  // even where nothing saves it (frozen gate/up under LoRA, a no-grad forward).
  b.hold_until(p + ".mlp.down_proj", y);
  return down;
}

}  // namespace

std::string add_rms_norm(GraphBuilder& b, RmsNormStyle style, const std::string& module,
                         const std::string& x, SizeExpr rows, int64_t width) {
  if (style == RmsNormStyle::kFused) return b.norm(module, x, rows, width, NormKind::kRmsNorm, true, false);
  return b.python_rms_norm(module, x, rows, width, style == RmsNormStyle::kTransformersF32);
}

std::pair<std::string, std::string> add_rope_tables(GraphBuilder& b, const std::string& prefix,
                                                    int64_t head_dim) {
  // position_ids is [1, S] (cache_position.unsqueeze(0)), so the tables are not per sample.
  const std::string positions = b.input(prefix + ".position_ids", SizeExpr{0, 0, 1, 0, 0, 0},
                                        DType::kInt64, false);
  const SizeExpr table{0, 0, head_dim, 0, 0, 0};
  const std::string cos = b.copy(prefix + ".rotary_emb.cos", "rope_table", {positions}, table);
  const std::string sin = b.copy(prefix + ".rotary_emb.sin", "rope_table", {positions}, table);
  return {cos, sin};
}

std::string add_llama_layers(GraphBuilder& b, const LlamaConfig& c, const std::string& prefix,
                             std::string hidden, const std::string& cos, const std::string& sin,
                             const ZooOptions& options) {
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.hidden / c.heads;
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const RopeCaches caches(c.rope_cache, options.rope_modules, c.max_position, head_dim);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = layer_prefix(prefix, i);
    b.begin_block(p, "llama_decoder", true);
    const std::string x = add_rms_norm(b, c.rms_norm, p + ".input_layernorm", hidden, rows, c.hidden);
    std::string q, k, v, qkv_base;
    if (c.fused_projections) {
      // Phi3Attention: one qkv_proj, sliced into q, k, v (views: nothing new kept).
      const std::string qkv = b.linear(p + ".self_attn.qkv_proj", x, rows, c.hidden,
                                       (c.heads + 2 * c.kv_heads) * head_dim, c.qkv_bias);
      const SizeExpr kv_elements = times(rows, c.kv_heads * head_dim);
      const auto parts = b.split(p + ".self_attn.split_qkv", qkv,
                                 {{p + ".self_attn.query", times(rows, c.heads * head_dim)},
                                  {p + ".self_attn.key", kv_elements},
                                  {p + ".self_attn.value", kv_elements}});
      q = parts[0];
      k = parts[1];
      v = parts[2];
      qkv_base = qkv;
    } else {
      q = b.linear(p + ".self_attn.q_proj", x, rows, c.hidden, c.heads * head_dim, c.qkv_bias);
      k = b.linear(p + ".self_attn.k_proj", x, rows, c.hidden, c.kv_heads * head_dim, c.qkv_bias);
      v = b.linear(p + ".self_attn.v_proj", x, rows, c.hidden, c.kv_heads * head_dim, c.qkv_bias);
    }
    if (c.qk_norm_full_width) {
      // OlmoeAttention: q_norm over heads x head_dim, k_norm over kv_heads x head_dim.
      q = add_rms_norm(b, c.rms_norm, p + ".self_attn.q_norm", q, rows, c.heads * head_dim);
      k = add_rms_norm(b, c.rms_norm, p + ".self_attn.k_norm", k, rows, c.kv_heads * head_dim);
    } else if (c.qk_norm) {
      // Qwen3Attention: q_norm / k_norm, RMSNorm over head_dim of every head.
      q = add_rms_norm(b, c.rms_norm, p + ".self_attn.q_norm", q, times(rows, c.heads), head_dim);
      k = add_rms_norm(b, c.rms_norm, p + ".self_attn.k_norm", k, times(rows, c.kv_heads), head_dim);
    }
    RopeAttention a{p + ".self_attn", c.heads, c.kv_heads, head_dim, true,
                    dropout_p(options, c.attention_dropout), qkv_base, c.sliding_window};
    const std::string attn = rope_attention(b, a, q, k, v, cos, sin, options.attention, options.sdpa_repeat_kv);
    caches.add_for_layer(b, i, p + ".self_attn.q.cos", p + ".self_attn.rotary_emb", prefix + ".rotary_emb");
    const std::string o = b.linear(p + ".self_attn.o_proj", attn, rows, c.heads * head_dim, c.hidden, false);
    hidden = b.add(p + ".residual_attn", hidden, o, h_elements);
    const std::string y = add_rms_norm(b, c.rms_norm, p + ".post_attention_layernorm", hidden, rows, c.hidden);
    const std::string down = add_decoder_mlp(b, c, p, y, i);
    hidden = b.add(p + ".residual_mlp", hidden, down, h_elements);
  }
  return hidden;
}

void add_causal_lm_head(GraphBuilder& b, const std::string& norm, const std::string& lm_head,
                        const std::string& hidden, int64_t hidden_size, int64_t vocab,
                        RmsNormStyle norm_style) {
  b.begin_block("head", "lm_head", false);
  const std::string labels = b.input("labels", tokens(), DType::kInt64, false);
  const std::string x = add_rms_norm(b, norm_style, norm, hidden, tokens(), hidden_size);
  const std::string logits = b.linear(lm_head, x, tokens(), hidden_size, vocab, false);
  b.lm_loss("loss", logits, labels, tokens(), vocab);
}

graph::LayerGraph build_llama(const LlamaConfig& config, const ZooOptions& options) {
  LlamaConfig c = config;
  c.moe.expert_modules = options.expert_modules;
  if (options.rms_norm_f32_normalized && c.rms_norm == RmsNormStyle::kTransformers) {
    c.rms_norm = RmsNormStyle::kTransformersF32;
  }
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);  // published as bfloat16 safetensors
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", tokens(), DType::kInt64, false);
  std::string embeds = b.embedding("model.embed_tokens", ids, tokens(), c.vocab, c.hidden);
  if (c.scale_embeddings) {
    // hidden_states * normalizer (sqrt(hidden_size)): a new tensor, nothing kept. Named
    // inside embed_tokens: transformers 5.x scales in GemmaTextScaledWordEmbedding.forward
    // (4.44: GemmaModel.forward), so the module's output is the scaled tensor
    // (planner/mechanisms/input_require_grads.h).
    embeds = b.copy("model.embed_tokens.embed_scale", "mul_scalar", {embeds}, times(tokens(), c.hidden));
  }
  const auto [cos, sin] = add_rope_tables(b, "model", c.head_dim > 0 ? c.head_dim : c.hidden / c.heads);
  const std::string hidden = add_llama_layers(b, c, "model", embeds, cos, sin, options);
  add_causal_lm_head(b, "model.norm", "lm_head", hidden, c.hidden, c.vocab, c.rms_norm);
  // LlamaModel.forward binds inputs_embeds and keeps it until it returns after the final
  // norm (transformers 5.23.0 modeling_llama.py): held in every forward, saved by none
  // under LoRA (layer 0's norm saves its fp32 copy).
  b.hold_until("model.norm", embeds);
  graph::LayerGraph graph = b.finish();
  if (c.tie_embeddings) tie_parameter(graph, "lm_head.weight", "model.embed_tokens.weight");
  return graph;
}

graph::LayerGraph build_qwen_7b(const ZooOptions& options) { return build_qwen(kQwen7b, options); }

graph::LayerGraph build_qwen(const QwenConfig& c, const ZooOptions& options) {
  const int64_t head_dim = c.hidden / c.heads;
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const SizeExpr ffn_elements = times(rows, c.ffn_half);
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", tokens(), DType::kInt64, false);
  std::string hidden = b.embedding("transformer.wte", ids, rows, c.vocab, c.hidden);
  hidden = b.dropout("transformer.drop", hidden, h_elements, dropout_p(options, c.dropout));
  const auto [cos, sin] = add_rope_tables(b, "transformer", head_dim);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "transformer.h." + std::to_string(i);
    b.begin_block(p, "qwen_block", true);
    const std::string x = b.norm(p + ".ln_1", hidden, rows, c.hidden, NormKind::kRmsNorm, true, false);
    const std::string qkv = b.linear(p + ".attn.c_attn", x, rows, c.hidden, 3 * c.hidden, true);
    const SizeExpr part = h_elements;
    const auto qkv_parts = b.split(p + ".attn.split_qkv", qkv,
                                   {{p + ".attn.query", part}, {p + ".attn.key", part},
                                    {p + ".attn.value", part}});
    // modeling_qwen.py _attn: softmax(attn_weights.float()).type(value.dtype).
    RopeAttention a{p + ".attn", c.heads, c.heads, head_dim, true, dropout_p(options, c.dropout), {}};
    const std::string attn = rope_attention(b, a, qkv_parts[0], qkv_parts[1], qkv_parts[2], cos, sin,
                                            options.attention, false);  // Qwen v1: no grouped K/V
    const std::string o = b.linear(p + ".attn.c_proj", attn, rows, c.hidden, c.hidden, false);
    hidden = b.add(p + ".residual_attn", hidden, o, h_elements);
    const std::string y = b.norm(p + ".ln_2", hidden, rows, c.hidden, NormKind::kRmsNorm, true, false);
    const std::string a1 = b.linear(p + ".mlp.w1", y, rows, c.hidden, c.ffn_half, false);
    const std::string a2 = b.linear(p + ".mlp.w2", y, rows, c.hidden, c.ffn_half, false);
    const std::string act = b.activation(p + ".mlp.silu", a2, ffn_elements, "silu");
    const std::string prod = b.mul(p + ".mlp.a1_mul_act", a1, act, ffn_elements);
    const std::string down = b.linear(p + ".mlp.c_proj", prod, rows, c.ffn_half, c.hidden, false);
    hidden = b.add(p + ".residual_mlp", hidden, down, h_elements);
  }
  add_causal_lm_head(b, "transformer.ln_f", "lm_head", hidden, c.hidden, c.vocab);
  return b.finish();
}

}  // namespace headroom::models
