#include "models/mmdit_parts.h"

#include <utility>

#include "models/layers.h"

namespace headroom::models {

std::vector<std::string> mmdit_modulation(MmditContext& c, const std::string& module, int64_t chunks) {
  const SizeExpr rows = SizeExpr::per_sample(1);
  const std::string act = c.b.activation(module + ".silu", c.temb, times(rows, c.d.hidden), "silu");
  const std::string emb = c.b.linear(module + ".linear", act, rows, c.d.hidden, chunks * c.d.hidden, true);
  std::vector<std::pair<std::string, SizeExpr>> parts;
  for (int64_t i = 0; i < chunks; ++i) {
    parts.push_back({module + ".chunk" + std::to_string(i), times(rows, c.d.hidden)});
  }
  return c.b.split(module + ".chunk", emb, parts);
}

std::string mmdit_scale_shift(MmditContext& c, const std::string& name, const std::string& normed,
                              SizeExpr rows, const std::string& shift, const std::string& scale) {
  const SizeExpr elements = times(rows, c.d.hidden);
  const std::string one_plus =
      c.b.copy(name + ".one_plus_scale", "add_scalar", {scale}, SizeExpr::per_sample(c.d.hidden));
  const std::string scaled = c.b.mul(name + ".scale", normed, one_plus, elements);
  return c.b.add(name + ".shift", scaled, shift, elements);
}

std::string mmdit_modulate(MmditContext& c, const std::string& name, const std::string& x, SizeExpr rows,
                           const std::string& shift, const std::string& scale) {
  const std::string normed = c.b.norm(name, x, rows, c.d.hidden, NormKind::kLayerNorm, false, false);
  return mmdit_scale_shift(c, name, normed, rows, shift, scale);
}

// The product keeps each operand while the other requires grad (under LoRA the
// gate comes from frozen layers, so x is not kept).
std::string mmdit_gated_residual(MmditContext& c, const std::string& gate_name, const std::string& add_name,
                                 const std::string& residual, const std::string& gate, const std::string& x,
                                 SizeExpr rows) {
  const std::string g = c.b.mul(gate_name, gate, x, times(rows, c.d.hidden));
  return c.b.add(add_name, residual, g, times(rows, c.d.hidden));
}

namespace {

// diffusers RMSNorm.forward (0.39.0 normalization.py): variance from
// x.to(float32).pow(2) (pow keeps the f32 copy), `x * rsqrt(variance + eps)` on x
// itself (the product keeps x and rstd), `.to(weight.dtype) * weight` (keeps the
// 16-bit normalized for the weight's gradient).
std::string diffusers_rms_norm(GraphBuilder& b, const std::string& module, const std::string& x, SizeExpr rows,
                               int64_t width) {
  const std::string y = b.python_rms_norm(module, x, rows, width, false);
  b.mutable_graph().nodes.back().saves.push_back(SavedRef{x, SaveWhen::kInputGrad});
  return y;
}

}  // namespace

MmditQkv mmdit_projections(MmditContext& c, const std::string& attn, const std::string& x, SizeExpr rows,
                           const MmditQkvNames& n) {
  const int64_t h = c.d.hidden;
  const SizeExpr head_rows = rows.scaled(c.d.heads);
  MmditQkv out;
  out.q = c.b.linear(attn + "." + n.q, x, rows, h, h, true);
  out.k = c.b.linear(attn + "." + n.k, x, rows, h, h, true);
  out.v = c.b.linear(attn + "." + n.v, x, rows, h, h, true);
  if (c.d.qk_norm == QkNorm::kDiffusers) {
    out.q = diffusers_rms_norm(c.b, attn + "." + n.norm_q, out.q, head_rows, c.d.head_dim);
    out.k = diffusers_rms_norm(c.b, attn + "." + n.norm_k, out.k, head_rows, c.d.head_dim);
  } else if (c.d.qk_norm == QkNorm::kPython) {
    // FluxAttention's q/k RMSNorm: x.to(f32).pow(2).mean(), x * rsqrt(...) in
    // f32, times the weight: keeps a float32 copy of x, rstd and the float32
    // normalized tensor (traced by scripts/exporter, docs/exporter.md).
    out.q = c.b.python_rms_norm(attn + "." + n.norm_q, out.q, head_rows, c.d.head_dim, true);
    out.k = c.b.python_rms_norm(attn + "." + n.norm_k, out.k, head_rows, c.d.head_dim, true);
  } else if (c.d.qk_norm == QkNorm::kFused) {
    out.q = c.b.norm(attn + "." + n.norm_q, out.q, head_rows, c.d.head_dim, NormKind::kRmsNorm, true, false);
    out.k = c.b.norm(attn + "." + n.norm_k, out.k, head_rows, c.d.head_dim, NormKind::kRmsNorm, true, false);
  }
  return out;
}

std::string mmdit_linear_on_view(MmditContext& c, const std::string& module, const std::string& view,
                                 const std::string& base, SizeExpr rows, int64_t in, int64_t out) {
  const std::string y = c.b.linear(module, view, rows, in, out, true);
  graph::Node& node = c.b.mutable_graph().nodes.back();
  node.inputs.push_back(base);
  node.saves = {SavedRef{base, SaveWhen::kParamGrad}};
  return y;
}

std::string mmdit_feed_forward(MmditContext& c, const std::string& norm_name, const std::string& ff,
                               const std::string& hidden, SizeExpr rows, const std::vector<std::string>& mod) {
  const SizeExpr mlp_elements = times(rows, c.d.mlp);
  const std::string x = mmdit_modulate(c, norm_name, hidden, rows, mod[3], mod[4]);
  const std::string up = c.b.linear(ff + ".net.0.proj", x, rows, c.d.hidden, c.d.mlp, true);
  const std::string act = c.b.activation(ff + ".net.0.gelu", up, mlp_elements, "gelu_tanh");
  const std::string down = c.b.linear(ff + ".net.2", act, rows, c.d.mlp, c.d.hidden, true);
  return mmdit_gated_residual(c, ff + ".gate", ff + ".residual", hidden, mod[5], down, rows);
}

std::string mmdit_embed_mlp(GraphBuilder& b, int64_t hidden, const std::string& module, const std::string& x,
                            int64_t in, const char* act_name) {
  const SizeExpr rows = SizeExpr::per_sample(1);
  const std::string l1 = b.linear(module + ".linear_1", x, rows, in, hidden, true);
  const std::string a = b.activation(module + "." + act_name, l1, times(rows, hidden), "silu");
  return b.linear(module + ".linear_2", a, rows, hidden, hidden, true);
}

void mmdit_flow_matching_loss(GraphBuilder& b, const std::string& out, SizeExpr out_elements) {
  const std::string target = b.input("target", out_elements, std::nullopt, false);
  OpSpec loss{"loss", "loss", {out, target}, SizeExpr::constant(1), DType::kF32,
              {SavedRef{out, SaveWhen::kAnyGrad}, SavedRef{target, SaveWhen::kAnyGrad}}, {},
              out_elements.scaled(3), out_elements.scaled(2), {}, out_elements.scaled(4)};
  b.op(loss);
}

}  // namespace headroom::models
