// GPT-NeoX / Pythia (HF GPTNeoXForCausalLM): LayerNorm pre-norm layers with a
// fused query_key_value projection, rotary embeddings on the first rotary_pct
// of each head, and (use_parallel_residual) attention and MLP both reading the
// layer input: x + attn(ln1(x)) + mlp(ln2(x)).
#include <algorithm>
#include <string>

#include "models/layers.h"
#include "models/llama.h"
#include "models/rope_caches.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// Rotary embedding on the first `rot` of each head's `head_dim` channels: the
// rotated part is sliced, rotated and concatenated with the rest (a new tensor).
std::string partial_rope(GraphBuilder& b, const std::string& prefix, const std::string& x,
                         const std::string& cos, const std::string& sin, int64_t heads,
                         int64_t head_dim, int64_t rot) {
  const SizeExpr full = times(tokens(), heads * head_dim);
  if (rot == head_dim) return apply_rope(b, prefix, x, cos, sin, full);
  const SizeExpr rot_elements = times(tokens(), heads * rot);
  const std::string part = b.copy(prefix + ".slice_rot", "slice", {x}, rot_elements);
  const std::string rotated = apply_rope(b, prefix, part, cos, sin, rot_elements);
  return b.copy(prefix + ".cat_pass", "concat", {rotated, x}, full);
}

std::string neox_attention(GraphBuilder& b, const NeoxConfig& c, const std::string& p,
                           const std::string& x, const std::string& cos, const std::string& sin,
                           const ZooOptions& options) {
  const int64_t head_dim = c.hidden / c.heads;
  const int64_t rot = std::max<int64_t>(2, static_cast<int64_t>(head_dim * c.rotary_pct) / 2 * 2);
  const SizeExpr h_elements = times(tokens(), c.hidden);
  const std::string a = p + ".attention";
  const std::string qkv =
      b.linear(a + ".query_key_value", x, tokens(), c.hidden, 3 * c.hidden, c.bias);
  const auto parts =
      b.split(a + ".split_qkv", qkv,
              {{a + ".query", h_elements}, {a + ".key", h_elements}, {a + ".value", h_elements}});
  const std::string q = partial_rope(b, a + ".q", parts[0], cos, sin, c.heads, head_dim, rot);
  const std::string k = partial_rope(b, a + ".k", parts[1], cos, sin, c.heads, head_dim, rot);
  const AttentionShape shape =
      self_attention_shape(c.heads, c.heads, head_dim, tokens(), square_tokens(), true);
  // v is a view of query_key_value's output: SDPA/flash keeps the view, so the
  // whole fused qkv stays alive until backward (traced by scripts/exporter);
  // eager attention's matmul keeps a contiguous copy of v instead.
  const std::string v = options.attention != AttentionImpl::kEager ? qkv : parts[2];
  std::string out = attention(b, options.attention, a, q, k, v, shape,
                              EagerAttentionOptions{true, dropout_p(options, c.attention_dropout)});
  if (options.attention == AttentionImpl::kEager) {
    out = b.copy(a + ".merge_heads", "transpose_contiguous", {out}, h_elements);
  }
  out = b.linear(a + ".dense", out, tokens(), c.hidden, c.hidden, c.bias);
  return b.dropout(p + ".post_attention_dropout", out, h_elements,
                   dropout_p(options, c.hidden_dropout));
}

std::string neox_mlp(GraphBuilder& b, const NeoxConfig& c, const std::string& p,
                     const std::string& x, const ZooOptions& options) {
  const std::string up =
      b.linear(p + ".mlp.dense_h_to_4h", x, tokens(), c.hidden, c.intermediate, true);
  const std::string act = b.activation(p + ".mlp.act", up, times(tokens(), c.intermediate), "gelu");
  const std::string down =
      b.linear(p + ".mlp.dense_4h_to_h", act, tokens(), c.intermediate, c.hidden, true);
  return b.dropout(p + ".post_mlp_dropout", down, times(tokens(), c.hidden),
                   dropout_p(options, c.hidden_dropout));
}

}  // namespace

graph::LayerGraph build_neox_from(const NeoxConfig& c, const ZooOptions& options) {
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const int64_t head_dim = c.hidden / c.heads;
  const int64_t rot = std::max<int64_t>(2, static_cast<int64_t>(head_dim * c.rotary_pct) / 2 * 2);
  GraphBuilder b;
  b.set_param_dtype(DType::kF16);  // Pythia publishes float16
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", rows, DType::kInt64, false);
  std::string hidden = b.embedding("gpt_neox.embed_in", ids, rows, c.vocab, c.hidden);
  hidden =
      b.dropout("gpt_neox.emb_dropout", hidden, h_elements, dropout_p(options, c.hidden_dropout));
  const auto [cos, sin] = add_rope_tables(b, "gpt_neox", rot);
  const RopeCaches caches(kNeoxRope, options.rope_modules, c.max_position, rot);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "gpt_neox.layers." + std::to_string(i);
    b.begin_block(p, "neox_layer", true);
    const std::string x =
        b.norm(p + ".input_layernorm", hidden, rows, c.hidden, NormKind::kLayerNorm, true, true);
    const std::string attn = neox_attention(b, c, p, x, cos, sin, options);
    if (caches.per_layer()) caches.add(b, p + ".attention.q.cos", p + ".attention.rotary_emb");
    if (c.parallel_residual) {
      const std::string y = b.norm(p + ".post_attention_layernorm", hidden, rows, c.hidden,
                                   NormKind::kLayerNorm, true, true);
      const std::string mlp = neox_mlp(b, c, p, y, options);
      const std::string sum = b.add(p + ".residual_mlp", mlp, attn, h_elements);
      hidden = b.add(p + ".residual", sum, hidden, h_elements);
    } else {
      hidden = b.add(p + ".residual_attn", attn, hidden, h_elements);
      const std::string y = b.norm(p + ".post_attention_layernorm", hidden, rows, c.hidden,
                                   NormKind::kLayerNorm, true, true);
      hidden = b.add(p + ".residual_mlp", neox_mlp(b, c, p, y, options), hidden, h_elements);
    }
  }
  b.begin_block("head", "lm_head", false);
  const std::string labels = b.input("labels", rows, DType::kInt64, false);
  const std::string x =
      b.norm("gpt_neox.final_layer_norm", hidden, rows, c.hidden, NormKind::kLayerNorm, true, true);
  const std::string logits = b.linear("embed_out", x, rows, c.hidden, c.vocab, false);
  if (c.tie_embeddings)
    b.mutable_graph().nodes.back().params[0].tied_to = "gpt_neox.embed_in.weight";
  b.lm_loss("loss", logits, labels, rows, c.vocab);
  return b.finish();
}

}  // namespace headroom::models
