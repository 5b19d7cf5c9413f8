// GPT-2 (HF GPT2LMHeadModel) and the Megatron-style test stack of gpt_stack.h.
#include <string>

#include "models/gpt_layer.h"
#include "models/gpt_stack.h"
#include "models/graph_builder.h"
#include "models/layers.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// openai-community/gpt2 config.json: n_layer 12, n_embd 768, n_head 12,
// vocab_size 50257, n_positions 1024, embd_pdrop = attn_pdrop = resid_pdrop =
// 0.1, activation_function "gelu_new", tie_word_embeddings (default true).
constexpr GptConfig kGpt2Small{12, 768, 12, 50257, 1024, 0.1, 0.1, 0.1};

struct GptBuild {
  GptConfig config;
  std::string prefix;      // "transformer.h" (GPT-2) or "layers" (stack)
  bool conv1d = true;
  bool unfused_gelu_new = true;
  AttentionImpl attention = AttentionImpl::kSdpa;
  DType param_dtype = DType::kF32;
};

graph::LayerGraph build_gpt(const GptBuild& g) {
  const GptConfig& c = g.config;
  const SizeExpr h_elements = times(tokens(), c.hidden);
  GraphBuilder b;
  b.set_param_dtype(g.param_dtype);
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", tokens(), DType::kInt64, false);
  const std::string positions =
      b.input("position_ids", SizeExpr{0, 0, 1, 0, 0, 0}, DType::kInt64, false);
  const std::string tok = b.embedding("transformer.wte", ids, tokens(), c.vocab, c.hidden);
  // wpe reads [1, S] positions: its output is broadcast over the batch.
  const std::string pos =
      b.embedding("transformer.wpe", positions, SizeExpr{0, 0, 1, 0, 0, 0}, c.positions, c.hidden);
  std::string hidden = b.add("transformer.embed_sum", tok, pos, h_elements);
  hidden = b.dropout("transformer.drop", hidden, h_elements, c.embedding_dropout);
  for (int64_t i = 0; i < c.layers; ++i) {
    GptLayerSpec spec;
    spec.prefix = g.prefix + "." + std::to_string(i);
    spec.hidden = c.hidden;
    spec.heads = c.heads;
    spec.inner = c.inner > 0 ? c.inner : 4 * c.hidden;
    spec.conv1d = g.conv1d;
    spec.unfused_gelu_new = g.unfused_gelu_new;
    spec.attention_dropout = c.attention_dropout;
    spec.residual_dropout = c.residual_dropout;
    spec.attention = g.attention;
    hidden = add_gpt_layer(b, spec, hidden);
  }
  b.begin_block("head", "lm_head", false);
  const std::string labels = b.input("labels", tokens(), DType::kInt64, false);
  const std::string x =
      b.norm("transformer.ln_f", hidden, tokens(), c.hidden, NormKind::kLayerNorm, true, true);
  const std::string logits = b.linear("lm_head", x, tokens(), c.hidden, c.vocab, false);
  // Tied: lm_head.weight is transformer.wte.weight.
  b.mutable_graph().nodes.back().params[0].tied_to = "transformer.wte.weight";
  b.lm_loss("loss", logits, labels, tokens(), c.vocab);
  return b.finish();
}

}  // namespace

graph::LayerGraph build_gpt2(const ZooOptions& options) { return build_gpt2_from(kGpt2Small, options); }

graph::LayerGraph build_gpt2_from(const GptConfig& config, const ZooOptions& options) {
  GptBuild g;
  g.config = config;
  g.config.embedding_dropout = dropout_p(options, config.embedding_dropout);
  g.config.attention_dropout = dropout_p(options, config.attention_dropout);
  g.config.residual_dropout = dropout_p(options, config.residual_dropout);
  g.prefix = "transformer.h";
  g.attention = options.attention;
  g.param_dtype = DType::kF32;  // the checkpoint is float32
  return build_gpt(g);
}

graph::LayerGraph build_gpt_layer_stack(int layers, int64_t hidden, int64_t heads, int64_t vocab,
                                        AttentionImpl attention, double dropout) {
  GptBuild g;
  g.config = GptConfig{layers, hidden, heads, vocab, 2048, dropout, dropout, dropout, 0};
  g.prefix = "layers";
  g.conv1d = false;
  g.unfused_gelu_new = false;  // Megatron's fused GELU keeps only its input
  g.attention = attention;
  g.param_dtype = DType::kBF16;
  graph::LayerGraph out = build_gpt(g);
  out.name = "gpt-layer-stack";
  out.family = "gpt";
  out.description = "Megatron-style GPT test stack (Korthikanti et al. 2022)";
  out.source = "Korthikanti et al. 2022, Reducing Activation Recomputation, Sec. 4.1";
  out.sequence.default_seq = 1024;
  out.sequence.max_seq = 2048;
  return out;
}

}  // namespace headroom::models
