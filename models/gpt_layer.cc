#include "models/gpt_layer.h"

#include "models/layers.h"

namespace headroom::models {
namespace {

// transformers NewGELUActivation:
//   0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3))))
// Autograd keeps x (pow), tanh's output (tanh), and both factors of the final
// product (0.5*x and 1+tanh); scalar multiplies and adds keep nothing.
std::string gelu_new_unfused(GraphBuilder& b, const std::string& p, const std::string& x,
                             SizeExpr elements) {
  const std::string half_x = b.copy(p + ".half_x", "mul_scalar", {x}, elements);
  OpSpec cube{p + ".pow", "pow", {x}, elements, std::nullopt,
              {SavedRef{x, SaveWhen::kInputGrad}}, {}, elements.scaled(2), elements.scaled(3), {}, {}};
  const std::string x3 = b.op(cube);
  const std::string inner = b.copy(p + ".inner", "axpy", {x, x3}, elements);
  OpSpec tanh{p + ".tanh", "tanh", {inner}, elements, std::nullopt,
              {SavedRef{p + ".tanh", SaveWhen::kInputGrad}}, {}, elements.scaled(4), elements.scaled(2), {}, {}};
  const std::string t = b.op(tanh);
  const std::string one_plus = b.copy(p + ".one_plus", "add_scalar", {t}, elements);
  return b.mul(p + ".gelu", half_x, one_plus, elements);
}

}  // namespace

std::string add_gpt_layer(GraphBuilder& b, const GptLayerSpec& s, const std::string& hidden) {
  const std::string& p = s.prefix;
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, s.hidden);
  const int64_t inner = s.inner > 0 ? s.inner : 4 * s.hidden;
  const SizeExpr ffn_elements = times(rows, inner);
  b.begin_block(p, "gpt_layer", true);
  const std::string x = b.norm(p + ".ln_1", hidden, rows, s.hidden, NormKind::kLayerNorm, true, true);
  const std::string qkv = b.linear(p + ".attn.c_attn", x, rows, s.hidden, 3 * s.hidden, true, s.conv1d);
  const auto parts = b.split(p + ".attn.split_qkv", qkv,
                             {{p + ".attn.query", h_elements}, {p + ".attn.key", h_elements},
                              {p + ".attn.value", h_elements}});
  const AttentionShape shape = self_attention_shape(s.heads, s.heads, s.hidden / s.heads, rows,
                                                    square_tokens(), true);
  // GPT-2 / Megatron eager attention: softmax in the compute dtype.
  std::string attn = attention(b, s.attention, p + ".attn", parts[0], parts[1], parts[2], shape,
                               EagerAttentionOptions{false, s.attention_dropout});
  if (s.attention == AttentionImpl::kEager) {
    attn = b.copy(p + ".attn.merge_heads", "transpose_contiguous", {attn}, h_elements);
  }
  std::string o = b.linear(p + ".attn.c_proj", attn, rows, s.hidden, s.hidden, true, s.conv1d);
  o = b.dropout(p + ".attn.resid_dropout", o, h_elements, s.residual_dropout);
  const std::string h = b.add(p + ".residual_attn", hidden, o, h_elements);
  const std::string y = b.norm(p + ".ln_2", h, rows, s.hidden, NormKind::kLayerNorm, true, true);
  const std::string fc = b.linear(p + ".mlp.c_fc", y, rows, s.hidden, inner, true, s.conv1d);
  const std::string act = s.unfused_gelu_new ? gelu_new_unfused(b, p + ".mlp.act", fc, ffn_elements)
                                             : b.activation(p + ".mlp.act", fc, ffn_elements, "gelu");
  std::string down = b.linear(p + ".mlp.c_proj", act, rows, inner, s.hidden, true, s.conv1d);
  down = b.dropout(p + ".mlp.dropout", down, h_elements, s.residual_dropout);
  return b.add(p + ".residual_mlp", h, down, h_elements);
}

}  // namespace headroom::models
