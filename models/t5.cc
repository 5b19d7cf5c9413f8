// T5ForConditionalGeneration as transformers 5.23.0 runs it (models/t5/modeling_t5.py,
// integrations/sdpa_attention.py); docs/models.md, "T5".
#include "models/t5.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "graph/op_traits.h"
#include "models/graph_builder.h"
#include "models/layers.h"

namespace headroom::models {
namespace {

// The two lengths of one run: S source tokens (the B*S rows of SizeExpr) and T target
// tokens, fixed per sample (B*T rows).
struct T5Shape {
  int64_t target = 0;
  SizeExpr source_rows() const { return tokens(); }
  SizeExpr target_rows() const { return fixed_tokens(target); }
};

struct StackPart {
  const T5Config& c;
  const T5Shape& shape;
  double dropout;
  AttentionImpl attention;
};

// T5LayerNorm: variance = x.to(f32).pow(2).mean(-1); y = x * rsqrt(variance + eps),
// cast to the weight's dtype when that is 16-bit; weight * y. Autograd keeps the f32
// copy (pow), x and rstd (the multiply of x by rstd), and the normalized tensor for
// the weight's gradient: x itself, not its f32 copy, is what the multiply keeps.
std::string t5_norm(GraphBuilder& b, const std::string& module, const std::string& x, SizeExpr rows,
                    int64_t width) {
  const std::string y = b.python_rms_norm(module, x, rows, width, false);
  b.mutable_graph().nodes.back().saves.push_back(SavedRef{x, SaveWhen::kInputGrad});
  return y;
}

// Fused SDPA with T5's additive float mask (integrations/sdpa_attention.py
// create_position_bias_mask): the mask reaches the kernel as attn_mask, which rules
// out flash; the memory-efficient kernel keeps it for its backward (the bias's gradient).
std::string masked_sdpa(GraphBuilder& b, const std::string& prefix, const std::string& q, const std::string& k,
                        const std::string& v, const AttentionShape& shape, const std::string& mask,
                        AttentionImpl impl, double dropout) {
  std::string out;
  if (impl == AttentionImpl::kEager) {
    // eager_attention_forward: matmul (scaling 1.0), + position_bias, softmax, dropout, matmul.
    out = b.eager_attention(prefix, q, k, v, shape, EagerAttentionOptions{false, dropout});
    b.mutable_graph().nodes.back().inputs.push_back(mask);
    return out;
  }
  out = b.sdpa_attention(prefix, q, k, v, shape);
  graph::Node& node = b.mutable_graph().nodes.back();
  node.inputs.push_back(mask);
  node.saves.push_back(SavedRef{mask, SaveWhen::kAnyGrad});
  return out;
}

AttentionShape cross_shape(const T5Config& c, SizeExpr query_rows, SizeExpr key_rows, SizeExpr scores) {
  AttentionShape shape = self_attention_shape(c.heads, c.heads, c.head_dim, query_rows, scores, false);
  shape.key_rows = key_rows;
  return shape;
}

// T5Attention: q, k, v (no bias) over `x` (k, v over `kv` for cross-attention),
// attention with the mask, o. Returns o's output.
std::string t5_attention(GraphBuilder& b, const StackPart& s, const std::string& p, const std::string& x,
                         const std::string& kv, SizeExpr rows, SizeExpr kv_rows, const AttentionShape& shape,
                         const std::string& mask) {
  const int64_t inner = s.c.heads * s.c.head_dim;
  const std::string q = b.linear(p + ".q", x, rows, s.c.hidden, inner, false);
  const std::string k = b.linear(p + ".k", kv, kv_rows, s.c.hidden, inner, false);
  const std::string v = b.linear(p + ".v", kv, kv_rows, s.c.hidden, inner, false);
  std::string out = masked_sdpa(b, p, q, k, v, shape, mask, s.attention, s.dropout);
  // eager_attention_forward's transpose(1, 2).contiguous() copies the [B, H, S, D]
  // matmul output; the fused kernel writes [B, S, H, D], so sdpa_attention_forward's
  // same call is a view there and o reads (and keeps) the kernel's output itself
  // (the exporter's cross-check on CPU shows one tensor).
  if (s.attention == AttentionImpl::kEager) {
    out = b.copy(p + ".merge_heads", "transpose_contiguous", {out}, times(rows, inner));
  }
  return b.linear(p + ".o", out, rows, inner, s.c.hidden, false);
}

// NewGELUActivation ("gelu_new", activations.py 5.23.0) op by op:
// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3)))). Autograd keeps x
// (pow: under autocast its fp32 copy), tanh's output, and both factors of the last
// product; the scalar products and sums keep nothing but exist in turn (each one
// alive with the next), which the recomputed forward of a checkpointed layer shows.
std::string gelu_new(GraphBuilder& b, const std::string& p, const std::string& x, SizeExpr elements) {
  const SizeExpr flops = elements.scaled(2);
  const std::string x3 = b.op(OpSpec{p + ".pow", "pow", {x}, elements, std::nullopt,
                                     {SavedRef{x, SaveWhen::kInputGrad}}, {}, flops, elements.scaled(3), {}, {}});
  const std::string scaled = b.copy(p + ".scale_cube", "mul_scalar", {x3}, elements);
  const std::string inner = b.add(p + ".inner", x, scaled, elements);
  const std::string arg = b.copy(p + ".scale_inner", "mul_scalar", {inner}, elements);
  const std::string t = b.op(OpSpec{p + ".tanh", "tanh", {arg}, elements, std::nullopt,
                                    {SavedRef{p + ".tanh", SaveWhen::kInputGrad}}, {}, elements.scaled(4), flops, {}, {}});
  const std::string one_plus = b.copy(p + ".one_plus", "add_scalar", {t}, elements);
  const std::string half_x = b.copy(p + ".half_x", "mul_scalar", {x}, elements);
  return b.mul(p + ".gelu", half_x, one_plus, elements);
}

// A sublayer's residual: hidden + dropout(out).
std::string residual(GraphBuilder& b, const StackPart& s, const std::string& p, const std::string& hidden,
                     const std::string& out, SizeExpr rows) {
  const SizeExpr h = times(rows, s.c.hidden);
  return b.add(p + ".residual", hidden, b.dropout(p + ".dropout", out, h, s.dropout), h);
}

// T5LayerFF: norm, DenseReluDense (wi, act | act(wi_0) * wi_1), dropout, wo, dropout, residual.
std::string t5_ff(GraphBuilder& b, const StackPart& s, const std::string& p, const std::string& hidden,
                  SizeExpr rows) {
  const T5Config& c = s.c;
  const SizeExpr f = times(rows, c.ffn);
  const std::string x = t5_norm(b, p + ".layer_norm", hidden, rows, c.hidden);
  const std::string d = p + ".DenseReluDense";
  std::string act;
  if (c.gated) {
    const std::string gate = b.linear(d + ".wi_0", x, rows, c.hidden, c.ffn, false);
    const std::string g = c.activation == "gelu_new" ? gelu_new(b, d + ".act", gate, f)
                                                     : b.activation(d + ".act", gate, f, c.activation);
    const std::string up = b.linear(d + ".wi_1", x, rows, c.hidden, c.ffn, false);
    act = b.mul(d + ".gated", g, up, f);
  } else {
    const std::string up = b.linear(d + ".wi", x, rows, c.hidden, c.ffn, false);
    act = c.activation == "gelu_new" ? gelu_new(b, d + ".act", up, f)
                                     : b.activation(d + ".act", up, f, c.activation);
  }
  act = b.dropout(d + ".dropout", act, f, s.dropout);
  const std::string out = b.linear(d + ".wo", act, rows, c.ffn, c.hidden, false);
  // T5LayerFF.forward binds the norm's output to `forwarded_states` and rebinds it only
  // when DenseReluDense returns: the frame holds it through wo.
  b.hold_until(d + ".wo", x);
  return residual(b, s, p, hidden, out, rows);
}

// T5Attention.compute_bias in a stack's first layer: relative_attention_bias (an
// nn.Embedding of buckets x heads) looked up at the [q, k] bucket indices, permuted
// to [1, heads, q, k]. One per stack, passed on to every layer (T5Stack.forward).
std::string relative_bias(GraphBuilder& b, const StackPart& s, const std::string& p, SizeExpr pairs) {
  // _relative_position_bucket's int64 [q, k] indices are made here, in the block, and
  // the embedding keeps them for its weight's gradient (derivatives.yaml: embedding).
  const std::string buckets = b.copy(p + ".relative_position_bucket", "relative_position_bucket", {}, pairs,
                                     DType::kInt64);
  return b.embedding(p + ".relative_attention_bias", buckets, pairs, s.c.buckets, s.c.heads);
}

std::string encoder_block(GraphBuilder& b, const StackPart& s, int64_t i, const std::string& hidden,
                          std::string& bias) {
  const std::string p = "encoder.block." + std::to_string(i);
  const SizeExpr rows = s.shape.source_rows();
  b.begin_block(p, "t5_encoder_block", true);
  const std::string a = p + ".layer.0";
  const std::string x = t5_norm(b, a + ".layer_norm", hidden, rows, s.c.hidden);
  if (i == 0) bias = relative_bias(b, s, a + ".SelfAttention", SizeExpr{0, 0, 0, 0, 1, 0});
  // create_position_bias_mask: position_bias.contiguous() of the permuted view, a
  // [1, heads, S, S] copy per layer (no padding mask, not causal).
  const std::string mask = b.copy(a + ".SelfAttention.bias_mask", "contiguous", {bias},
                                  SizeExpr{0, 0, 0, 0, s.c.heads, 0});
  const AttentionShape shape = self_attention_shape(s.c.heads, s.c.heads, s.c.head_dim, rows, square_tokens(), false);
  const std::string o = t5_attention(b, s, a + ".SelfAttention", x, x, rows, rows, shape, mask);
  // T5LayerSelfAttention.forward's `normed_hidden_states` lives until SelfAttention returns.
  b.hold_until(a + ".SelfAttention.o", x);
  const std::string h = residual(b, s, a, hidden, o, rows);
  return t5_ff(b, s, p + ".layer.1", h, rows);
}

// The causal mask folded into the bias: torch.where(causal, position_bias, min), a
// new [1, heads, T, T] tensor per layer (create_position_bias_mask, is_causal).
// Under SDPA where's backward keeps its bool condition, the [1, 1, T, T] causal
// mask made in the same call, when the bias needs a gradient (derivatives.yaml).
std::string causal_bias(GraphBuilder& b, const StackPart& s, const std::string& p, const std::string& bias,
                        int64_t t) {
  const std::string name = p + ".bias_mask";
  const SizeExpr elements = SizeExpr::constant(s.c.heads * t * t);
  if (s.attention == AttentionImpl::kEager) return b.copy(name, "where", {bias}, elements);
  const std::string causal = b.copy(p + ".causal_mask", "ge", {}, SizeExpr::constant(t * t), DType::kBool);
  OpSpec where;
  where.name = name;
  where.op = "where";
  where.inputs = {bias, causal};
  where.out_elements = elements;
  where.saves = {SavedRef{causal, SaveWhen::kInputGrad}};
  return b.op(where);
}

struct DecoderContext {
  std::string encoder_out;
  std::string self_bias;
  std::string cross_bias;
};

std::string decoder_block(GraphBuilder& b, const StackPart& s, int64_t i, const std::string& hidden,
                          DecoderContext& ctx) {
  const std::string p = "decoder.block." + std::to_string(i);
  const int64_t t = s.shape.target;
  const SizeExpr rows = s.shape.target_rows();
  b.begin_block(p, "t5_decoder_block", true);
  const std::string a = p + ".layer.0";
  const std::string x = t5_norm(b, a + ".layer_norm", hidden, rows, s.c.hidden);
  if (i == 0) ctx.self_bias = relative_bias(b, s, a + ".SelfAttention", SizeExpr::constant(t * t));
  const std::string mask = causal_bias(b, s, a + ".SelfAttention", ctx.self_bias, t);
  AttentionShape self = self_attention_shape(s.c.heads, s.c.heads, s.c.head_dim, rows, fixed_square(t), true);
  const std::string o = t5_attention(b, s, a + ".SelfAttention", x, x, rows, rows, self, mask);
  b.hold_until(a + ".SelfAttention.o", x);
  std::string h = residual(b, s, a, hidden, o, rows);

  const std::string c = p + ".layer.1";
  const std::string y = t5_norm(b, c + ".layer_norm", h, rows, s.c.hidden);
  // The cross-attention layers have no relative bias: the first makes zeros
  // [1, heads, T, S] in the query's dtype (T5Attention.forward) that every later one is
  // passed and keeps. They read nothing and need no gradient, unless the Trainer's
  // checkpointing makes them a leaf that does (planner/mechanisms/t5_position_bias.h).
  if (i == 0) {
    ctx.cross_bias = b.copy(c + ".EncDecAttention.zero_bias", "zeros", {}, SizeExpr{0, 0, s.c.heads * t, 0, 0, 0});
  }
  const AttentionShape cross = cross_shape(s.c, rows, s.shape.source_rows(), SizeExpr::per_token(t));
  const std::string co = t5_attention(b, s, c + ".EncDecAttention", y, ctx.encoder_out, rows,
                                      s.shape.source_rows(), cross, ctx.cross_bias);
  b.hold_until(c + ".EncDecAttention.o", y);  // T5LayerCrossAttention's normed_hidden_states
  h = residual(b, s, c, h, co, rows);
  return t5_ff(b, s, p + ".layer.2", h, rows);
}

// The stack's final_layer_norm and dropout.
std::string stack_end(GraphBuilder& b, const StackPart& s, const std::string& stack, const std::string& hidden,
                      SizeExpr rows) {
  const std::string n = t5_norm(b, stack + ".final_layer_norm", hidden, rows, s.c.hidden);
  return b.dropout(stack + ".dropout", n, times(rows, s.c.hidden), s.dropout);
}

// T5ForConditionalGeneration.forward returns Seq2SeqLMOutput(loss, logits, ...,
// encoder_last_hidden_state): its frame and then the returned object hold the 16-bit
// logits and the encoder's output to the forward's end, where the Trainer's compute_loss
// keeps only the loss (modeling_t5.py, trainer.py 5.23.0). Nothing saves the logits for
// backward (_log_softmax's backward reads its result), so they die when the forward
// returns. The node reads nothing and holds them (op model_output); Accelerate's
// convert_outputs_to_fp32 copies them there (planner/mechanisms/output_fp32_copies.h).
void hold_model_output(GraphBuilder& b, const std::vector<std::string>& returned) {
  graph::LayerGraph& g = b.mutable_graph();
  graph::Node node;
  node.name = "model_output";
  node.op = std::string(graph::op::kModelOutput);
  node.block = static_cast<int>(g.blocks.size()) - 1;
  node.holds = returned;
  g.nodes.push_back(std::move(node));
}

// lm_head over the decoder's output (scaled by d_model^-0.5 when
// scale_decoder_outputs), then CrossEntropyLoss on the logits as they are: log_softmax
// keeps its output in the logits' dtype (no upcast, unlike the causal LMs' loss_function).
void t5_head(GraphBuilder& b, const StackPart& s, const std::string& decoded, const std::string& labels,
             const std::string& encoder_out) {
  const T5Config& c = s.c;
  const SizeExpr rows = s.shape.target_rows();
  b.begin_block("head", "head", false);
  std::string x = decoded;
  if (c.scale_decoder_outputs) x = b.copy("scale_decoder_outputs", "mul_scalar", {x}, times(rows, c.hidden));
  const std::string logits = b.linear("lm_head", x, rows, c.hidden, c.vocab, false);
  // _log_softmax keeps its result only (derivatives.yaml, torch 2.11): the logits
  // themselves live as long as the model's output holds them (hold_model_output).
  OpSpec log_softmax{"loss.log_softmax", "log_softmax", {logits}, times(rows, c.vocab), std::nullopt,
                     {SavedRef{"loss.log_softmax", SaveWhen::kAnyGrad}}, {},
                     times(rows, 5 * c.vocab), times(rows, 2 * c.vocab), {}, {}};
  const std::string logp = b.op(log_softmax);
  OpSpec nll{"loss", "nll_loss", {logp, labels}, SizeExpr::constant(1), DType::kF32, {}, {}, rows, rows, {}, {}};
  hold_model_output(b, {b.op(nll), logits, encoder_out});
}

}  // namespace

graph::LayerGraph build_t5(const T5Config& c, const ZooOptions& options) {
  const T5Shape shape{options.target_tokens.value_or(kT5DefaultTargetTokens)};
  const StackPart s{c, shape, dropout_p(options, c.dropout), options.attention};
  const SizeExpr src = shape.source_rows();
  const SizeExpr tgt = shape.target_rows();
  GraphBuilder b;
  b.set_param_dtype(DType::kF32);  // published float32
  b.begin_block("encoder.embed", "embedding", false);
  const std::string ids = b.input("input_ids", src, DType::kInt64, false);
  const std::string labels = b.input("labels", tgt, DType::kInt64, false);
  std::string h = b.embedding("shared", ids, src, c.vocab, c.hidden);
  h = b.dropout("encoder.embed_dropout", h, times(src, c.hidden), s.dropout);
  std::string bias;
  for (int64_t i = 0; i < c.encoder_layers; ++i) h = encoder_block(b, s, i, h, bias);
  b.begin_block("encoder.final", "norm", false);
  DecoderContext ctx;
  ctx.encoder_out = stack_end(b, s, "encoder", h, src);

  // _shift_right(labels): decoder_input_ids, then the shared embedding again.
  b.begin_block("decoder.embed", "embedding", false);
  const std::string dec_ids = b.copy("decoder_input_ids", "shift_right", {labels}, tgt, DType::kInt64);
  std::string d = b.embedding("decoder.embed_tokens", dec_ids, tgt, c.vocab, c.hidden);
  d = b.dropout("decoder.embed_dropout", d, times(tgt, c.hidden), s.dropout);
  for (int64_t i = 0; i < c.decoder_layers; ++i) d = decoder_block(b, s, i, d, ctx);
  b.begin_block("decoder.final", "norm", false);
  d = stack_end(b, s, "decoder", d, tgt);
  t5_head(b, s, d, labels, ctx.encoder_out);
  graph::LayerGraph graph = b.finish();
  // T5ForConditionalGeneration._tied_weights_keys: both stacks' embed_tokens (and
  // lm_head when tied) are shared.weight.
  tie_parameter(graph, "decoder.embed_tokens.weight", "shared.weight");
  if (c.tie_lm_head) tie_parameter(graph, "lm_head.weight", "shared.weight");
  graph.name = c.name;
  return graph;
}

void set_t5_metadata(graph::LayerGraph& graph) {
  graph.family = "t5";
  graph.sequence.unit = "tokens";
  // Relative positions have no table to outgrow; n_positions (512) is the length
  // the checkpoints were trained at, the default here.
  graph.sequence.default_seq = 512;
  graph.sequence.max_seq = 16384;
  graph.lora_targets = {"q", "v"};
}

T5Config flan_t5_config(const std::string& size, const ZooOptions& options) {
  // google/flan-t5-{base,xl,xxl} config.json: feed_forward_proj gated-gelu, d_kv 64,
  // vocab_size 32128, dropout_rate 0.1, tie_word_embeddings false, float32.
  T5Config c;
  c.name = "flan-t5-" + size;
  c.gated = true;
  c.activation = "gelu_new";
  c.scale_decoder_outputs = false;
  c.tie_lm_head = !options.t5_tie_as_configured;
  if (size == "base") {
    c.hidden = 768, c.ffn = 2048, c.heads = 12, c.encoder_layers = c.decoder_layers = 12;
  } else if (size == "xl") {
    c.hidden = 2048, c.ffn = 5120, c.heads = 32, c.encoder_layers = c.decoder_layers = 24;
  } else {
    c.hidden = 4096, c.ffn = 10240, c.heads = 64, c.encoder_layers = c.decoder_layers = 24;
  }
  return c;
}

T5Config t5_base_config(const ZooOptions&) {
  // google-t5/t5-base config.json: d_model 768, d_ff 3072, 12 heads, 12 + 12 layers,
  // relu (feed_forward_proj's default), tie_word_embeddings absent (true).
  T5Config c;
  c.name = "t5-base";
  c.hidden = 768, c.ffn = 3072, c.heads = 12, c.encoder_layers = c.decoder_layers = 12;
  return c;
}

}  // namespace headroom::models
