// MPT as llm-foundry builds it (llmfoundry/models/mpt/modeling_mpt.py MPTModel and
// MPTForCausalLM; layers/blocks.py MPTBlock, attention.py, ffn.py MPTMLP, norm.py
// LPLayerNorm; read at b2a43a1, the commit the benchmark cases cite):
//   x = wte(ids) (+ wpe(positions) when learned_pos_emb and not alibi); emb_drop
//   per block: a = norm_1(x); qkv = Wqkv(a); q, k, v = qkv.split (views);
//              x = x + resid_attn_dropout(out_proj(attn(q, k, v)))
//              m = norm_2(x); x = x + resid_ffn_dropout(down_proj(gelu(up_proj(m))))
//   logits = wte(norm_f(x), unembed=True) = F.linear(x, wte.weight): the
//   embeddings are always tied (SharedEmbedding).
// Every Linear and LayerNorm has a bias unless no_bias (MPTModel.__init__ removes
// each module's bias parameter). nn.GELU(approximate='none') is one kernel keeping
// its input. The fused attention kernels (attn_impl triton: FlashAttnFunc.forward
// saves q, k, v, o, lse and the bias) keep q, k, v as views of Wqkv's output.
#include <string>

#include "models/layers.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// mosaicml/mpt-7b config.json: d_model 4096, n_heads 32, n_layers 32,
// expansion_ratio 4, max_seq_len 2048, vocab_size 50432, no_bias true,
// attn_config.alibi true (so no learned positions), norm_type
// low_precision_layernorm, dropouts 0, torch_dtype bfloat16.
constexpr MptConfig kMpt7b{4096, 32, 32, 4, 2048, 50432, 0.0, 0.0, 0.0,
                           false, true, false, true, graph::DType::kBF16};

// LPLayerNorm (norm.py) casts x, weight and bias to the autocast dtype and runs
// layer_norm with autocast off: what it keeps is the native layer_norm's (x, the
// f32 mean and rstd), in 16 bits under autocast. op "low_precision_norm" tells
// the autocast rewrite (planner/mechanisms/autocast.h) that it runs in 16 bits.
std::string mpt_norm(GraphBuilder& b, const MptConfig& c, const std::string& module,
                     const std::string& x) {
  const std::string y = b.norm(module, x, tokens(), c.hidden, NormKind::kLayerNorm, true, c.bias);
  if (c.low_precision_norm) b.mutable_graph().nodes.back().op = "low_precision_norm";
  return y;
}

std::string mpt_attention(GraphBuilder& b, const MptConfig& c, const std::string& p,
                          const std::string& x, const std::string& alibi_bias,
                          const ZooOptions& options) {
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const std::string a = p + ".attn";
  const std::string qkv = b.linear(a + ".Wqkv", x, rows, c.hidden, 3 * c.hidden, c.bias);
  const auto parts = b.split(a + ".split_qkv", qkv,
                             {{a + ".query", h_elements}, {a + ".key", h_elements}, {a + ".value", h_elements}});
  const AttentionShape shape =
      self_attention_shape(c.heads, c.heads, c.hidden / c.heads, rows, square_tokens(), true);
  // scaled_multihead_dot_product_attention (attn_impl torch) runs softmax in the
  // compute dtype.
  std::string out = attention(b, options.attention, a, parts[0], parts[1], parts[2], shape,
                              EagerAttentionOptions{false, dropout_p(options, c.attention_dropout)});
  if (options.attention == AttentionImpl::kEager) {
    out = b.copy(a + ".merge_heads", "transpose_contiguous", {out}, h_elements);
  } else if (!alibi_bias.empty()) {
    // The fused kernel keeps the ALiBi bias it was given (a view of MPTModel's
    // attn_bias, shared by every block).
    graph::Node& kernel = b.mutable_graph().nodes.back();
    kernel.inputs.push_back(alibi_bias);
    kernel.saves.push_back({alibi_bias, SaveWhen::kInputGrad});
  }
  return b.linear(a + ".out_proj", out, rows, c.hidden, c.hidden, c.bias);
}

std::string mpt_block(GraphBuilder& b, const MptConfig& c, int64_t i, const std::string& hidden,
                      const std::string& alibi_bias, const ZooOptions& options) {
  const std::string p = "transformer.blocks." + std::to_string(i);
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const int64_t inner = c.expansion_ratio * c.hidden;
  const double resid_p = dropout_p(options, c.residual_dropout);
  b.begin_block(p, "mpt_block", true);
  const std::string a = mpt_norm(b, c, p + ".norm_1", hidden);
  std::string attn = mpt_attention(b, c, p, a, alibi_bias, options);
  attn = b.dropout(p + ".resid_attn_dropout", attn, h_elements, resid_p);
  const std::string x = b.add(p + ".residual_attn", hidden, attn, h_elements);
  const std::string m = mpt_norm(b, c, p + ".norm_2", x);
  const std::string up = b.linear(p + ".ffn.up_proj", m, rows, c.hidden, inner, c.bias);
  const std::string act = b.activation(p + ".ffn.act", up, times(rows, inner), "gelu");
  std::string down = b.linear(p + ".ffn.down_proj", act, rows, inner, c.hidden, c.bias);
  down = b.dropout(p + ".resid_ffn_dropout", down, h_elements, resid_p);
  return b.add(p + ".residual_ffn", x, down, h_elements);
}

}  // namespace

graph::LayerGraph build_mpt_from(const MptConfig& c, const ZooOptions& options) {
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const SizeExpr per_position{0, 0, 1, 0, 0, 0};  // [1, S]: shared by the batch
  GraphBuilder b;
  b.set_param_dtype(c.param_dtype);
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", rows, DType::kInt64, false);
  std::string hidden = b.embedding("transformer.wte", ids, rows, c.vocab, c.hidden);
  std::string alibi_bias;
  if (c.learned_positions && !c.alibi) {
    const std::string positions = b.input("position_ids", per_position, DType::kInt64, false);
    const std::string pos = b.embedding("transformer.wpe", positions, per_position, c.max_seq, c.hidden);
    hidden = b.add("transformer.embed_sum", hidden, pos, h_elements);
  } else if (c.alibi) {
    // MPTModel._attn_bias: build_alibi_bias of shape [1, n_heads, 1, S] for
    // causal attention, in the compute dtype, built once and cached.
    const std::string positions = b.input("position_ids", per_position, DType::kInt64, false);
    alibi_bias = b.copy("transformer.attn_bias", "alibi_bias", {positions}, per_position.scaled(c.heads));
  }
  hidden = b.dropout("transformer.emb_drop", hidden, h_elements, dropout_p(options, c.embedding_dropout));
  for (int64_t i = 0; i < c.layers; ++i) hidden = mpt_block(b, c, i, hidden, alibi_bias, options);
  b.begin_block("head", "lm_head", false);
  const std::string labels = b.input("labels", rows, DType::kInt64, false);
  const std::string x = mpt_norm(b, c, "transformer.norm_f", hidden);
  // wte(x, unembed=True): F.linear with the embedding matrix, no bias.
  const std::string logits = b.linear("lm_head", x, rows, c.hidden, c.vocab, false);
  b.mutable_graph().nodes.back().params[0].tied_to = "transformer.wte.weight";
  b.lm_loss("loss", logits, labels, rows, c.vocab);
  graph::LayerGraph graph = b.finish();
  graph.family = "mpt";
  return graph;
}

graph::LayerGraph build_mpt_7b(const ZooOptions& options) { return build_mpt_from(kMpt7b, options); }

}  // namespace headroom::models
