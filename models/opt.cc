// OPT (HF OPTForCausalLM): learned positions (offset by 2), q/k/v/out
// projections and fc1/fc2 with biases, ReLU; pre-LayerNorm layers when
// do_layer_norm_before (all but OPT-350m), and project_in/project_out when
// word_embed_proj_dim differs from hidden_size.
#include <string>

#include "models/layers.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// OPTLearnedPositionalEmbedding keeps 2 extra rows (the fairseq padding offset).
constexpr int64_t kPositionOffset = 2;

std::string opt_layer(GraphBuilder& b, const OptConfig& c, int64_t i, std::string hidden,
                      const ZooOptions& options) {
  const std::string p = "model.decoder.layers." + std::to_string(i);
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const double p_drop = dropout_p(options, c.dropout);
  b.begin_block(p, "opt_layer", true);
  const std::string a = p + ".self_attn";
  std::string x = hidden;
  if (c.pre_norm)
    x = b.norm(p + ".self_attn_layer_norm", hidden, rows, c.hidden, NormKind::kLayerNorm, true,
               true);
  const std::string q = b.linear(a + ".q_proj", x, rows, c.hidden, c.hidden, c.bias);
  const std::string k = b.linear(a + ".k_proj", x, rows, c.hidden, c.hidden, c.bias);
  const std::string v = b.linear(a + ".v_proj", x, rows, c.hidden, c.hidden, c.bias);
  const AttentionShape shape =
      self_attention_shape(c.heads, c.heads, c.hidden / c.heads, rows, square_tokens(), true);
  std::string out =
      attention(b, options.attention, a, q, k, v, shape,
                // transformers' eager OPT attention: softmax(dtype=float32).to(dtype).
                EagerAttentionOptions{true, dropout_p(options, c.attention_dropout)});
  if (options.attention == AttentionImpl::kEager) {
    out = b.copy(a + ".merge_heads", "transpose_contiguous", {out}, h_elements);
  }
  out = b.linear(a + ".out_proj", out, rows, c.hidden, c.hidden, c.bias);
  out = b.dropout(p + ".attn_output_dropout", out, h_elements, p_drop);
  hidden = b.add(p + ".residual_attn", hidden, out, h_elements);
  if (!c.pre_norm) {
    hidden = b.norm(p + ".self_attn_layer_norm", hidden, rows, c.hidden, NormKind::kLayerNorm, true,
                    true);
  }
  x = hidden;
  if (c.pre_norm)
    x = b.norm(p + ".final_layer_norm", hidden, rows, c.hidden, NormKind::kLayerNorm, true, true);
  const std::string up = b.linear(p + ".fc1", x, rows, c.hidden, c.ffn, c.bias);
  const std::string act = b.activation(p + ".activation_fn", up, times(rows, c.ffn), c.activation);
  std::string down = b.linear(p + ".fc2", act, rows, c.ffn, c.hidden, c.bias);
  down = b.dropout(p + ".dropout", down, h_elements, p_drop);
  hidden = b.add(p + ".residual_mlp", hidden, down, h_elements);
  if (!c.pre_norm)
    hidden =
        b.norm(p + ".final_layer_norm", hidden, rows, c.hidden, NormKind::kLayerNorm, true, true);
  return hidden;
}

}  // namespace

graph::LayerGraph build_opt_from(const OptConfig& c, const ZooOptions& options) {
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const SizeExpr positions{0, 0, 1, 0, 0, 0};
  const bool project = c.embed_dim != c.hidden;
  GraphBuilder b;
  b.set_param_dtype(DType::kF16);  // facebook/opt-* publish float16
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", rows, DType::kInt64, false);
  const std::string pos_ids = b.input("position_ids", positions, DType::kInt64, false);
  std::string hidden = b.embedding("model.decoder.embed_tokens", ids, rows, c.vocab, c.embed_dim);
  if (project)
    hidden = b.linear("model.decoder.project_in", hidden, rows, c.embed_dim, c.hidden, false);
  const std::string pos = b.embedding("model.decoder.embed_positions", pos_ids, positions,
                                      c.max_position + kPositionOffset, c.hidden);
  hidden = b.add("model.decoder.embed_sum", hidden, pos, h_elements);
  hidden = b.dropout("model.decoder.dropout", hidden, h_elements, dropout_p(options, c.dropout));
  for (int64_t i = 0; i < c.layers; ++i) hidden = opt_layer(b, c, i, hidden, options);
  b.begin_block("head", "lm_head", false);
  const std::string labels = b.input("labels", rows, DType::kInt64, false);
  if (c.pre_norm) {
    hidden = b.norm("model.decoder.final_layer_norm", hidden, rows, c.hidden, NormKind::kLayerNorm,
                    true, true);
  }
  if (project)
    hidden = b.linear("model.decoder.project_out", hidden, rows, c.hidden, c.embed_dim, false);
  const std::string logits = b.linear("lm_head", hidden, rows, c.embed_dim, c.vocab, false);
  if (c.tie_embeddings)
    b.mutable_graph().nodes.back().params[0].tied_to = "model.decoder.embed_tokens.weight";
  b.lm_loss("loss", logits, labels, rows, c.vocab);
  return b.finish();
}

}  // namespace headroom::models
