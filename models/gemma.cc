// Gemma 2 / Gemma 3 decoder graphs (transformers 5.23.0 modeling_gemma2.py and
// modeling_gemma3.py; docs/models.md, "Gemma 2 and Gemma 3").
#include "models/gemma.h"

#include <cmath>
#include <string>
#include <vector>

#include "graph/op_traits.h"
#include "models/layers.h"

namespace headroom::models {
namespace {

// max, sub, exp, sum, div a score (as GraphBuilder's eager softmax counts it).
constexpr int64_t kSoftmaxFlopsPerElement = 5;

// x -> x / cap -> tanh -> * cap (eager_attention_forward's softcap, Gemma2ForCausalLM's
// final_logit_softcapping). Dividing and multiplying by a Python float keep nothing;
// tanh's backward reads its output (1 - y^2), so autograd keeps the tanh output, a
// 16-bit tensor as large as x (the oracle: saved "tanh", bf16).
std::string soft_cap(GraphBuilder& b, const std::string& name, const std::string& x, SizeExpr elements) {
  const std::string scaled = b.copy(name + ".div", "mul_scalar", {x}, elements);
  OpSpec tanh{name + ".tanh", "tanh", {scaled}, elements, std::nullopt,
              {SavedRef{name + ".tanh", SaveWhen::kInputGrad}}, {}, elements, elements, {}, {}};
  const std::string capped = b.op(tanh);
  return b.copy(name + ".mul", "mul_scalar", {capped}, elements);
}

// eager_attention_forward with a softcap: matmul(q, k^T) * scaling, the cap, the
// mask added, softmax in fp32 cast back, dropout, matmul with v. Every layer keeps
// the bf16 tanh output and the fp32 and bf16 probabilities, each [B, heads, S, S],
// whatever its sliding window (the mask only sets scores to the dtype's minimum).
std::string softcapped_eager(GraphBuilder& b, const std::string& prefix, const std::string& q,
                             const std::string& k, const std::string& v, const AttentionShape& shape,
                             double dropout) {
  const SizeExpr scores = shape.scores_per_head.scaled(shape.heads);
  const SizeExpr matmul_flops = scores.scaled(2 * shape.head_dim);
  OpSpec qk{prefix + ".qk", std::string(graph::op::kMatmul), {q, k}, scores, std::nullopt,
            {SavedRef{q, SaveWhen::kInputGrad}, SavedRef{k, SaveWhen::kInputGrad}}, {},
            matmul_flops, matmul_flops.scaled(2), {}, {}};
  const std::string raw = b.op(qk);
  const std::string scaled = b.copy(prefix + ".scores", "mul_scalar", {raw}, scores);
  const std::string capped = soft_cap(b, prefix + ".softcap", scaled, scores);
  const std::string masked = b.copy(prefix + ".mask", "scale_mask", {capped}, scores);
  OpSpec softmax{prefix + ".softmax", std::string(graph::op::kSoftmax), {masked}, scores, DType::kF32,
                 {SavedRef{prefix + ".softmax", SaveWhen::kInputGrad}}, {},
                 scores.scaled(kSoftmaxFlopsPerElement), scores.scaled(3), {}, {}};
  std::string probs = b.op(softmax);
  probs = b.copy(prefix + ".softmax_cast", "cast", {probs}, scores);
  probs = b.dropout(prefix + ".dropout", probs, scores, dropout);
  OpSpec pv{prefix + ".pv", std::string(graph::op::kMatmul), {probs, v},
            times(shape.query_rows, shape.heads * shape.head_dim), std::nullopt,
            {SavedRef{probs, SaveWhen::kInputGrad}, SavedRef{v, SaveWhen::kInputGrad}}, {},
            matmul_flops, matmul_flops.scaled(2), {}, {}};
  return b.op(pv);
}

struct RopeTables {
  std::string cos, sin;
};

// The attention a soft-capped model runs. transformers 5.23's SDPA refuses a softcap
// (integrations/sdpa_attention.py) and Gemma2PreTrainedModel sets _supports_sdpa = False,
// so a model loaded without attn_implementation falls back to eager
// (modeling_utils.py get_correct_attn_implementation), as transformers advises for
// training Gemma 2. headroom's sdpa also stands for flash_attention_2, whose kernel takes
// the cap and keeps what SDPA keeps: priced as eager, an over-estimate for it.
// flex_attention applies the cap in its score_mod and keeps what flex keeps.
AttentionImpl attention_run(const GemmaConfig& c, AttentionImpl requested) {
  return c.attn_softcap && requested == AttentionImpl::kSdpa ? AttentionImpl::kEager : requested;
}

// Gemma2Attention / Gemma3Attention after the projections (and Gemma 3's q/k norms):
// RoPE, then the attention the run uses. Eager copies K and V to every head
// (repeat_kv) and makes its output contiguous.
std::string gemma_attention(GraphBuilder& b, const GemmaConfig& c, const std::string& prefix,
                            const std::string& q, const std::string& k, const std::string& v,
                            const RopeTables& rope, int64_t sliding_window, const ZooOptions& options) {
  const LlamaConfig& base = c.base;
  const SizeExpr q_elements = times(tokens(), base.heads * base.head_dim);
  const SizeExpr kv_elements = times(tokens(), base.kv_heads * base.head_dim);
  const std::string q_rope = apply_rope(b, prefix + ".q", q, rope.cos, rope.sin, q_elements);
  std::string k_in = apply_rope(b, prefix + ".k", k, rope.cos, rope.sin, kv_elements);
  std::string v_in = v;
  int64_t kv_heads = base.kv_heads;
  const AttentionImpl impl = attention_run(c, options.attention);
  if ((impl == AttentionImpl::kEager || options.sdpa_repeat_kv) && base.kv_heads != base.heads) {
    k_in = b.copy(prefix + ".repeat_kv_k", std::string(graph::op::kRepeatKv), {k_in}, q_elements);
    v_in = b.copy(prefix + ".repeat_kv_v", std::string(graph::op::kRepeatKv), {v}, q_elements);
    kv_heads = base.heads;
  }
  AttentionShape shape = self_attention_shape(base.heads, kv_heads, base.head_dim, tokens(), square_tokens(), true);
  // A sliding layer's SDPA takes the bool mask transformers builds for it once S reaches
  // the window (GraphBuilder::sdpa_attention; masking_utils.py, 5.23.0).
  shape.sliding_window = sliding_window;
  const double dropout = dropout_p(options, base.attention_dropout);
  std::string out;
  if (impl == AttentionImpl::kEager && c.attn_softcap) {
    out = softcapped_eager(b, prefix, q_rope, k_in, v_in, shape, dropout);
  } else {
    out = attention(b, impl, prefix, q_rope, k_in, v_in, shape, EagerAttentionOptions{true, dropout});
  }
  if (impl != AttentionImpl::kEager) return out;
  return b.copy(prefix + ".attn_output", "transpose_contiguous", {out}, q_elements);
}

// One Gemma2DecoderLayer / Gemma3DecoderLayer: input norm, attention, post-attention
// norm, residual; pre-feed-forward norm, GeGLU MLP, post-feed-forward norm, residual.
std::string gemma_layer(GraphBuilder& b, const GemmaConfig& c, const std::string& p, std::string hidden,
                        const RopeTables& rope, int64_t sliding_window, const ZooOptions& options) {
  const LlamaConfig& base = c.base;
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, base.hidden);
  const SizeExpr ffn_elements = times(rows, base.intermediate);
  const int64_t hd = base.head_dim;
  const std::string x = add_rms_norm(b, base.rms_norm, p + ".input_layernorm", hidden, rows, base.hidden);
  std::string q = b.linear(p + ".self_attn.q_proj", x, rows, base.hidden, base.heads * hd, base.qkv_bias);
  std::string k = b.linear(p + ".self_attn.k_proj", x, rows, base.hidden, base.kv_heads * hd, base.qkv_bias);
  const std::string v = b.linear(p + ".self_attn.v_proj", x, rows, base.hidden, base.kv_heads * hd, base.qkv_bias);
  if (base.qk_norm) {
    // Gemma3Attention: q_norm / k_norm (GemmaRMSNorm over head_dim) before RoPE.
    q = add_rms_norm(b, base.rms_norm, p + ".self_attn.q_norm", q, times(rows, base.heads), hd);
    k = add_rms_norm(b, base.rms_norm, p + ".self_attn.k_norm", k, times(rows, base.kv_heads), hd);
  }
  const std::string attn = gemma_attention(b, c, p + ".self_attn", q, k, v, rope, sliding_window, options);
  const std::string o = b.linear(p + ".self_attn.o_proj", attn, rows, base.heads * hd, base.hidden, base.qkv_bias);
  const std::string o_norm = add_rms_norm(b, base.rms_norm, p + ".post_attention_layernorm", o, rows, base.hidden);
  hidden = b.add(p + ".residual_attn", hidden, o_norm, h_elements);
  const std::string y = add_rms_norm(b, base.rms_norm, p + ".pre_feedforward_layernorm", hidden, rows, base.hidden);
  const std::string gate = b.linear(p + ".mlp.gate_proj", y, rows, base.hidden, base.intermediate, false);
  const std::string up = b.linear(p + ".mlp.up_proj", y, rows, base.hidden, base.intermediate, false);
  const std::string act = b.activation(p + ".mlp.act_fn", gate, ffn_elements, base.mlp_activation);
  const std::string prod = b.mul(p + ".mlp.act_mul_up", act, up, ffn_elements);
  const std::string down = b.linear(p + ".mlp.down_proj", prod, rows, base.intermediate, base.hidden, false);
  const std::string d_norm = add_rms_norm(b, base.rms_norm, p + ".post_feedforward_layernorm", down, rows, base.hidden);
  return b.add(p + ".residual_mlp", hidden, d_norm, h_elements);
}

// The final norm, lm_head, Gemma's final_logit_softcapping and the HF causal-LM loss.
void gemma_head(GraphBuilder& b, const GemmaConfig& c, const std::string& hidden) {
  b.begin_block("head", "lm_head", false);
  const std::string labels = b.input("labels", tokens(), DType::kInt64, false);
  const std::string x = add_rms_norm(b, c.base.rms_norm, "model.norm", hidden, tokens(), c.base.hidden);
  std::string logits = b.linear("lm_head", x, tokens(), c.base.hidden, c.base.vocab, false);
  if (c.final_softcap) logits = soft_cap(b, "lm_head.softcap", logits, times(tokens(), c.base.vocab));
  b.lm_loss("loss", logits, labels, tokens(), c.base.vocab);
}

}  // namespace

namespace {

// The pattern transformers derives without layer_types: layer i slides unless
// (i + 1) is a multiple of `pattern`.
std::vector<bool> sliding_pattern(int64_t layers, int64_t pattern) {
  std::vector<bool> sliding;
  for (int64_t i = 0; i < layers; ++i) sliding.push_back((i + 1) % pattern != 0);
  return sliding;
}

// What Gemma 2 and 3 share: GeGLU, head_dim 256, scaled and tied embeddings, GemmaRMSNorm.
LlamaConfig gemma_base(int64_t hidden, int64_t intermediate, int64_t layers, int64_t vocab,
                       int64_t max_position) {
  LlamaConfig base{hidden, intermediate, layers, 16, 8, vocab, max_position, 0.0};
  base.head_dim = 256;
  base.tie_embeddings = true;
  base.mlp_activation = "gelu_tanh";
  base.scale_embeddings = true;
  base.rms_norm = RmsNormStyle::kTransformersF32;
  return base;
}

}  // namespace

GemmaConfig gemma2_9b_config() {
  GemmaConfig c;
  c.base = gemma_base(3584, 14336, 42, 256000, 8192);
  c.sliding = sliding_pattern(42, 2);
  c.sliding_window = 4096;
  c.attn_softcap = 50.0;
  c.final_softcap = 30.0;
  return c;
}

GemmaConfig gemma3_12b_text_config() {
  GemmaConfig c;
  c.base = gemma_base(3840, 15360, 48, 262208, 131072);
  c.base.qk_norm = true;
  c.sliding = sliding_pattern(48, 6);
  c.sliding_window = 1024;
  c.local_rope = true;
  return c;
}

graph::LayerGraph build_gemma(const GemmaConfig& c, const ZooOptions& options) {
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", tokens(), DType::kInt64, false);
  std::string hidden = b.embedding("model.embed_tokens", ids, tokens(), c.base.vocab, c.base.hidden);
  // GemmaTextScaledWordEmbedding.forward: times sqrt(hidden_size), a new tensor.
  hidden = b.copy("model.embed_tokens.embed_scale", "mul_scalar", {hidden}, times(tokens(), c.base.hidden));
  // Gemma3RotaryEmbedding returns cos/sin per layer type (rope_theta 1e6 for the
  // global layers, rope_local_base_freq 1e4 for the sliding ones); Gemma 2 one pair.
  const auto [cos, sin] = add_rope_tables(b, "model", c.base.head_dim);
  RopeTables global{cos, sin};
  RopeTables local = global;
  if (c.local_rope) {
    const auto [local_cos, local_sin] = add_rope_tables(b, "model.local", c.base.head_dim);
    local = RopeTables{local_cos, local_sin};
  }
  for (int64_t i = 0; i < c.base.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    b.begin_block(p, "gemma_decoder", true);
    const bool sliding = i < static_cast<int64_t>(c.sliding.size()) && c.sliding[static_cast<size_t>(i)];
    hidden = gemma_layer(b, c, p, hidden, sliding ? local : global, sliding ? c.sliding_window : 0, options);
  }
  gemma_head(b, c, hidden);
  graph::LayerGraph graph = b.finish();
  if (c.base.tie_embeddings) tie_parameter(graph, "lm_head.weight", "model.embed_tokens.weight");
  return graph;
}

}  // namespace headroom::models
