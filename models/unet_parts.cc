// diffusers 0.39.0's UNet building blocks as graph nodes (models/unet_parts.h).
// What each op keeps follows tools/autograd/derivatives.yaml (PyTorch 2.11):
// - native_group_norm: the input, the weight, and the fp32 mean and rstd, one per
//   (sample, group) ([B, G]); not its output. Under autocast group_norm is on the
//   fp32 list (autocast_mode.cpp), as layer_norm is: planner/mechanisms/autocast.cc
//   treats this node as one (op "norm" with ":mean").
// - convolution: the input, whichever gradient is wanted (models/resnet.cc).
// - SiLU and GELU keep their input; the GEGLU product keeps both factors.
// - upsample_nearest2d keeps nothing (its backward needs only the sizes).
// - `x / rescale_output_factor` (AttnProcessor2_0) and `(x + h) /
//   output_scale_factor` (ResnetBlock2D) divide by a Python float: a new tensor,
//   nothing kept.
#include "models/unet_parts.h"

#include <string>

#include "models/conv2d.h"
#include "models/layers.h"

namespace headroom::models {
namespace {

// FLOP weights of group norm per element, as GraphBuilder::norm counts a norm's.
constexpr int64_t kGroupNormFwdFlopsPerElement = 5;
constexpr int64_t kGroupNormBwdFlopsPerElement = 8;
// GEGLU (activations.py): proj to 2 x inner, inner = 4 x dim (FeedForward mult 4).
constexpr int64_t kFeedForwardMult = 4;

SizeExpr per_sample_rows() { return SizeExpr::per_sample(1); }

// Self-attention scores per head: B * (positions S)^2.
SizeExpr self_scores(const UnetContext& c, int64_t level) {
  const int64_t p = unet_positions(c, level);
  return SizeExpr{0, 0, 0, 0, 0, p * p};
}

// Attention (AttnProcessor2_0): to_q over x; to_k, to_v over `kv` (x itself for
// attn1, encoder_hidden_states for attn2), no biases; SDPA; the output's
// transpose(1, 2).reshape is a view of the kernel's output, which follows q's
// [B, N, H, D] layout (models/sd3.cc sdpa); to_out.0 with bias; the division by
// rescale_output_factor. q, k and v stay bound to the processor's end.
std::string attention_module(UnetContext& c, const std::string& attn, const std::string& x, int64_t level,
                             int64_t channels, int64_t heads, bool cross) {
  GraphBuilder& b = c.b;
  const SizeExpr rows = unet_rows(c, level);
  const SizeExpr kv_rows = cross ? fixed_tokens(c.text_tokens) : rows;
  const int64_t kv_width = cross ? c.cross_dim : channels;
  const std::string kv = cross ? c.context : x;
  const std::string q = b.linear(attn + ".to_q", x, rows, channels, channels, false);
  const std::string k = b.linear(attn + ".to_k", kv, kv_rows, kv_width, channels, false);
  const std::string v = b.linear(attn + ".to_v", kv, kv_rows, kv_width, channels, false);
  AttentionShape shape = self_attention_shape(heads, heads, channels / heads, rows, self_scores(c, level), false);
  if (cross) {
    shape.key_rows = kv_rows;
    shape.scores_per_head = unet_rows(c, level).scaled(c.text_tokens);
  }
  std::string o = attention(b, c.options.attention, attn, q, k, v, shape, EagerAttentionOptions{false, 0.0});
  if (c.options.attention == AttentionImpl::kEager) {
    o = b.copy(attn + ".merge_heads", "transpose_contiguous", {o}, times(rows, channels));
  }
  o = b.linear(attn + ".to_out.0", o, rows, channels, channels, true);
  const std::string out = b.copy(attn + ".rescale", "div_scalar", {o}, times(rows, channels));
  for (const std::string& held : {q, k, v}) b.hold_until(out, held);
  return out;
}

// FeedForward(dim, activation_fn="geglu"): GEGLU's proj, chunk(2) into the
// hidden half and the gate, hidden * gelu(gate), Dropout(0) (no node), net.2.
std::string geglu_feed_forward(UnetContext& c, const std::string& ff, const std::string& x, int64_t level,
                               int64_t channels) {
  GraphBuilder& b = c.b;
  const SizeExpr rows = unet_rows(c, level);
  const int64_t inner = kFeedForwardMult * channels;
  const SizeExpr inner_elements = times(rows, inner);
  const std::string proj = b.linear(ff + ".net.0.proj", x, rows, channels, 2 * inner, true);
  const auto halves = b.split(ff + ".net.0.chunk", proj,
                              {{ff + ".net.0.hidden", inner_elements}, {ff + ".net.0.gate", inner_elements}});
  const std::string gelu = b.activation(ff + ".net.0.gelu", halves[1], inner_elements, "gelu");
  const std::string product = b.mul(ff + ".net.0.mul", halves[0], gelu, inner_elements);
  return b.linear(ff + ".net.2", product, rows, inner, channels, true);
}

// BasicTransformerBlock (norm_type "layer_norm", attn1 self, attn2 cross, GEGLU
// feed-forward), in forward's order. Its Python locals: `norm_hidden_states`
// lives until the next norm rebinds it (the last to the block's end),
// `attn_output` until attn2 rebinds it (attn2's to the end); the caller's
// argument until the block returns.
std::string basic_block(UnetContext& c, const std::string& p, const std::string& x, int64_t level,
                        int64_t channels, int64_t heads) {
  GraphBuilder& b = c.b;
  b.begin_block(p, "unet_transformer", true);
  const SizeExpr rows = unet_rows(c, level);
  const SizeExpr elements = times(rows, channels);
  const std::string n1 = b.norm(p + ".norm1", x, rows, channels, NormKind::kLayerNorm, true, true);
  const std::string a1 = attention_module(c, p + ".attn1", n1, level, channels, heads, false);
  const std::string h1 = b.add(p + ".attn1_residual", a1, x, elements);
  const std::string n2 = b.norm(p + ".norm2", h1, rows, channels, NormKind::kLayerNorm, true, true);
  const std::string a2 = attention_module(c, p + ".attn2", n2, level, channels, heads, true);
  const std::string h2 = b.add(p + ".attn2_residual", a2, h1, elements);
  const std::string n3 = b.norm(p + ".norm3", h2, rows, channels, NormKind::kLayerNorm, true, true);
  const std::string ff = geglu_feed_forward(c, p + ".ff", n3, level, channels);
  const std::string out = b.add(p + ".ff_residual", ff, h2, elements);
  b.hold_until(p + ".norm2", n1);
  b.hold_until(p + ".attn2.rescale", a1);
  b.hold_until(p + ".norm3", n2);
  for (const std::string& held : {x, a2, n3}) b.hold_until(out, held);
  return out;
}

}  // namespace

int64_t unet_positions(const UnetContext& c, int64_t level) {
  int64_t p = 1;
  for (int64_t l = level; l < c.levels - 1; ++l) p *= 4;
  return p;
}

SizeExpr unet_rows(const UnetContext& c, int64_t level) { return tokens().scaled(unet_positions(c, level)); }

SizeExpr unet_map(const UnetContext& c, int64_t level, int64_t channels) {
  return unet_rows(c, level).scaled(channels);
}

std::string unet_group_norm(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                            int64_t channels) {
  GraphBuilder& b = c.b;
  const SizeExpr elements = unet_map(c, level, channels);
  // GraphBuilder::norm's node (x kept, weight and bias, ":rstd" and ":mean"), with
  // the statistics resized from per row to per (sample, group).
  const std::string y = b.norm(module, x, unet_rows(c, level), channels, NormKind::kLayerNorm, true, true);
  graph::LayerGraph& g = b.mutable_graph();
  graph::Node& node = g.nodes.back();
  const SizeExpr stats = SizeExpr::per_sample(c.groups);
  node.fwd_io_elements = elements.scaled(2) + stats.scaled(2);
  node.fwd_flops = elements.scaled(kGroupNormFwdFlopsPerElement);
  node.bwd_input_flops = elements.scaled(kGroupNormBwdFlopsPerElement);
  for (graph::Tensor& t : g.tensors) {
    if (t.name == module + ":rstd" || t.name == module + ":mean") t.elements = stats;
  }
  return y;
}

std::string unet_conv(UnetContext& c, const std::string& module, const std::string& x, int64_t out_level,
                      int64_t in, int64_t out, int64_t kernel) {
  return conv2d(c.b, module, x, in, out, kernel, unet_map(c, out_level, out), true);
}

// ResnetBlock2D.forward: norm1, SiLU, conv1; SiLU(temb), time_emb_proj, the
// broadcast add; norm2, SiLU, Dropout(0) (no node), conv2; conv_shortcut (1x1)
// when the width changes; (input + h) / output_scale_factor.
std::string unet_resnet(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                        int64_t in, int64_t out) {
  GraphBuilder& b = c.b;
  b.begin_block(module, "unet_resnet", true);
  const SizeExpr elements = unet_map(c, level, out);
  std::string h = unet_group_norm(c, module + ".norm1", x, level, in);
  h = b.activation(module + ".nonlinearity", h, unet_map(c, level, in), "silu");
  h = unet_conv(c, module + ".conv1", h, level, in, out, 3);
  const std::string t = b.activation(module + ".time_silu", c.temb, SizeExpr::per_sample(c.temb_dim), "silu");
  const std::string t_proj = b.linear(module + ".time_emb_proj", t, per_sample_rows(), c.temb_dim, out, true);
  h = b.add(module + ".add_temb", h, t_proj, elements);
  h = unet_group_norm(c, module + ".norm2", h, level, out);
  h = b.activation(module + ".nonlinearity_1", h, elements, "silu");
  h = unet_conv(c, module + ".conv2", h, level, out, out, 3);
  const std::string shortcut = in == out ? x : unet_conv(c, module + ".conv_shortcut", x, level, in, out, 1);
  const std::string sum = b.add(module + ".residual", shortcut, h, elements);
  return b.copy(module + ".rescale", "div_scalar", {sum}, elements);
}

// Transformer2DModel.forward for continuous inputs with use_linear_projection:
// norm (GroupNorm, eps 1e-6), permute(0, 2, 3, 1).reshape (a copy: the permuted
// map is not contiguous), proj_in; the blocks; proj_out, reshape.permute.contiguous
// (a copy), + the input. Its own parts are blocks "<module>.proj_in" and
// "<module>.proj_out" around the checkpointable transformer blocks.
std::string unet_transformer(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                             int64_t channels, int64_t heads, int64_t layers) {
  GraphBuilder& b = c.b;
  const SizeExpr rows = unet_rows(c, level);
  const SizeExpr elements = times(rows, channels);
  b.begin_block(module + ".proj_in", "unet_projection", false);
  std::string h = unet_group_norm(c, module + ".norm", x, level, channels);
  h = b.copy(module + ".to_tokens", "transpose_contiguous", {h}, elements);
  h = b.linear(module + ".proj_in", h, rows, channels, channels, true);
  for (int64_t i = 0; i < layers; ++i) {
    h = basic_block(c, module + ".transformer_blocks." + std::to_string(i), h, level, channels, heads);
  }
  b.begin_block(module + ".proj_out", "unet_projection", false);
  h = b.linear(module + ".proj_out", h, rows, channels, channels, true);
  h = b.copy(module + ".to_map", "transpose_contiguous", {h}, elements);
  const std::string out = b.add(module + ".residual", h, x, elements);
  return out;
}

std::string unet_downsample(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                            int64_t channels) {
  c.b.begin_block(module, "unet_sample", false);
  return unet_conv(c, module + ".conv", x, level + 1, channels, channels, 3);
}

std::string unet_upsample(UnetContext& c, const std::string& module, const std::string& x, int64_t level,
                          int64_t channels) {
  c.b.begin_block(module, "unet_sample", false);
  const std::string up =
      c.b.copy(module + ".interpolate", "upsample_nearest2d", {x}, unet_map(c, level - 1, channels));
  return unet_conv(c, module + ".conv", up, level - 1, channels, channels, 3);
}

}  // namespace headroom::models
