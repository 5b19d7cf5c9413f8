// FLUX.1 Kontext [dev] transformer as diffusers FluxTransformer2DModel runs it
// (transformer_flux.py): 19 double-stream blocks (separate image and text
// weights, joint attention) and 38 single-stream blocks over the concatenated
// text+image tokens, modulated by the timestep/guidance/pooled-text embedding
// "temb". S = image tokens: target and context image in Kontext, each
// (resolution/16)^2 packed latent tokens; the 512 T5 tokens are fixed per sample.
#include <string>
#include <tuple>
#include <vector>

#include "models/flux.h"
#include "models/flux_text.h"
#include "models/layers.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

SizeExpr image_rows() { return tokens(); }
SizeExpr text_rows(const FluxConfig& f) { return fixed_tokens(f.text_tokens); }
SizeExpr joint_rows(const FluxConfig& f) { return SizeExpr{0, f.text_tokens, 0, 1, 0, 0}; }
// B*(S+T)^2 = B*S^2 + 2T*B*S + T^2*B.
SizeExpr joint_scores(const FluxConfig& f) {
  const int64_t t = f.text_tokens;
  return SizeExpr{0, t * t, 0, 2 * t, 0, 1};
}

struct Context {
  GraphBuilder& b;
  const FluxConfig& f;
  const ZooOptions& options;
  std::string temb;
  std::string cos;
  std::string sin;
};

// SiLU(temb) -> linear to `chunks` x hidden, split into per-sample chunks.
std::vector<std::string> modulation(Context& c, const std::string& module, int64_t chunks) {
  const SizeExpr rows = SizeExpr::per_sample(1);
  const std::string act = c.b.activation(module + ".silu", c.temb, times(rows, c.f.hidden), "silu");
  const std::string emb = c.b.linear(module + ".linear", act, rows, c.f.hidden, chunks * c.f.hidden, true);
  std::vector<std::pair<std::string, SizeExpr>> parts;
  for (int64_t i = 0; i < chunks; ++i) {
    parts.push_back({module + ".chunk" + std::to_string(i), times(rows, c.f.hidden)});
  }
  return c.b.split(module + ".chunk", emb, parts);
}

// LayerNorm without affine, then x * (1 + scale) + shift.
std::string modulate(Context& c, const std::string& name, const std::string& x, SizeExpr rows,
                     const std::string& shift, const std::string& scale) {
  const SizeExpr elements = times(rows, c.f.hidden);
  const std::string normed = c.b.norm(name, x, rows, c.f.hidden, NormKind::kLayerNorm, false, false);
  const std::string one_plus =
      c.b.copy(name + ".one_plus_scale", "add_scalar", {scale}, SizeExpr::per_sample(c.f.hidden));
  const std::string scaled = c.b.mul(name + ".scale", normed, one_plus, elements);
  return c.b.add(name + ".shift", scaled, shift, elements);
}

// gate[:, None] * x: keeps each operand while the other requires grad (under
// LoRA the gate comes from frozen layers, so x is not kept).
std::string gated(Context& c, const std::string& name, const std::string& gate,
                  const std::string& x, SizeExpr rows) {
  return c.b.mul(name, gate, x, times(rows, c.f.hidden));
}

struct Qkv {
  std::string q, k, v;
};

// to_q/to_k/to_v (with bias), then per-head RMSNorm on q and k.
Qkv projections(Context& c, const std::string& attn, const std::string& x, SizeExpr rows,
                const char* q_name, const char* k_name, const char* v_name, const char* nq,
                const char* nk) {
  const int64_t h = c.f.hidden;
  const SizeExpr head_rows = rows.scaled(c.f.heads);
  Qkv out;
  const std::string q = c.b.linear(attn + "." + q_name, x, rows, h, h, true);
  const std::string k = c.b.linear(attn + "." + k_name, x, rows, h, h, true);
  out.v = c.b.linear(attn + "." + v_name, x, rows, h, h, true);
  if (c.f.python_qk_norm) {
    // diffusers RMSNorm: x.to(f32).pow(2).mean(), x * rsqrt(...) in f32, times the
    // weight: keeps a float32 copy of x, rstd and the float32 normalized tensor
    // (traced by scripts/exporter, docs/exporter.md).
    out.q = c.b.python_rms_norm(attn + "." + nq, q, head_rows, c.f.head_dim, true);
    out.k = c.b.python_rms_norm(attn + "." + nk, k, head_rows, c.f.head_dim, true);
    return out;
  }
  out.q = c.b.norm(attn + "." + nq, q, head_rows, c.f.head_dim, NormKind::kRmsNorm, true, false);
  out.k = c.b.norm(attn + "." + nk, k, head_rows, c.f.head_dim, NormKind::kRmsNorm, true, false);
  return out;
}

// RoPE on joint q and k (diffusers apply_rotary_emb computes in f32 and casts
// back: transients only; cos/sin are persistent), then attention over T+S.
std::string joint_attention(Context& c, const std::string& attn, const std::string& q,
                            const std::string& k, const std::string& v) {
  const SizeExpr elements = times(joint_rows(c.f), c.f.hidden);
  const std::string q_rope = apply_rope(c.b, attn + ".q", q, c.cos, c.sin, elements);
  const std::string k_rope = apply_rope(c.b, attn + ".k", k, c.cos, c.sin, elements);
  AttentionShape shape = self_attention_shape(c.f.heads, c.f.heads, c.f.head_dim,
                                              joint_rows(c.f), joint_scores(c.f), false);
  const double p = dropout_p(c.options, 0.0);
  std::string out = attention(c.b, c.options.attention, attn, q_rope, k_rope, v, shape,
                              EagerAttentionOptions{false, p});
  if (c.options.attention == AttentionImpl::kEager) {
    out = c.b.copy(attn + ".merge_heads", "transpose_contiguous", {out}, elements);
  }
  return out;
}

// A linear over a slice (a view) of `base`: autograd keeps the view, whose
// storage is all of `base`, so the node reads and saves `base` itself.
std::string linear_on_view(Context& c, const std::string& module, const std::string& view,
                           const std::string& base, SizeExpr rows, int64_t in, int64_t out) {
  const std::string y = c.b.linear(module, view, rows, in, out, true);
  graph::Node& node = c.b.mutable_graph().nodes.back();
  node.inputs.push_back(base);
  node.saves = {SavedRef{base, SaveWhen::kParamGrad}};
  return y;
}

struct Stream {
  const char* norm1;
  const char* norm2;
  const char* ff;
  const char* q;
  const char* k;
  const char* v;
  const char* norm_q;
  const char* norm_k;
  const char* out;
  SizeExpr rows;
};

// Feed-forward of one stream: GELU(tanh) MLP 3072 -> 12288 -> 3072, gated residual.
std::string stream_ff(Context& c, const std::string& p, const Stream& s, const std::string& hidden,
                      const std::vector<std::string>& mod) {
  const SizeExpr mlp_elements = times(s.rows, c.f.mlp);
  const std::string x = modulate(c, p + "." + s.norm2, hidden, s.rows, mod[3], mod[4]);
  const std::string ff = p + "." + s.ff;
  const std::string up = c.b.linear(ff + ".net.0.proj", x, s.rows, c.f.hidden, c.f.mlp, true);
  const std::string act = c.b.activation(ff + ".net.0.gelu", up, mlp_elements, "gelu_tanh");
  const std::string down = c.b.linear(ff + ".net.2", act, s.rows, c.f.mlp, c.f.hidden, true);
  const std::string g = gated(c, ff + ".gate", mod[5], down, s.rows);
  return c.b.add(ff + ".residual", hidden, g, times(s.rows, c.f.hidden));
}

// FluxTransformerBlock. Returns {image, text} hidden states.
std::pair<std::string, std::string> double_block(Context& c, int64_t i, const std::string& img,
                                                 const std::string& txt) {
  const std::string p = "transformer_blocks." + std::to_string(i);
  c.b.begin_block(p, "flux_double_stream", true);
  const Stream image{"norm1", "norm2", "ff", "to_q", "to_k", "to_v", "norm_q", "norm_k",
                     "to_out.0", image_rows()};
  const Stream text{"norm1_context", "norm2_context", "ff_context", "add_q_proj", "add_k_proj",
                    "add_v_proj", "norm_added_q", "norm_added_k", "to_add_out", text_rows(c.f)};
  const std::vector<std::string> img_mod = modulation(c, p + ".norm1", 6);
  const std::vector<std::string> txt_mod = modulation(c, p + ".norm1_context", 6);
  const std::string img_x = modulate(c, p + ".norm1.norm", img, image.rows, img_mod[0], img_mod[1]);
  const std::string txt_x = modulate(c, p + ".norm1_context.norm", txt, text.rows, txt_mod[0], txt_mod[1]);
  const std::string attn = p + ".attn";
  const Qkv iq = projections(c, attn, img_x, image.rows, image.q, image.k, image.v, image.norm_q,
                             image.norm_k);
  const Qkv tq = projections(c, attn, txt_x, text.rows, text.q, text.k, text.v, text.norm_q,
                             text.norm_k);
  const SizeExpr joint = times(joint_rows(c.f), c.f.hidden);
  const std::string q = c.b.copy(attn + ".cat_q", "concat", {tq.q, iq.q}, joint);
  const std::string k = c.b.copy(attn + ".cat_k", "concat", {tq.k, iq.k}, joint);
  const std::string v = c.b.copy(attn + ".cat_v", "concat", {tq.v, iq.v}, joint);
  const std::string o = joint_attention(c, attn, q, k, v);
  const auto parts = c.b.split(attn + ".split_out", o,
                               {{attn + ".out_text", times(text.rows, c.f.hidden)},
                                {attn + ".out_image", times(image.rows, c.f.hidden)}});
  const std::string img_o = linear_on_view(c, attn + ".to_out.0", parts[1], o, image.rows,
                                           c.f.hidden, c.f.hidden);
  const std::string txt_o = linear_on_view(c, attn + ".to_add_out", parts[0], o, text.rows,
                                           c.f.hidden, c.f.hidden);
  std::string img_h = c.b.add(p + ".attn_residual", img, gated(c, p + ".attn_gate", img_mod[2], img_o, image.rows),
                              times(image.rows, c.f.hidden));
  std::string txt_h = c.b.add(p + ".attn_residual_context", txt,
                              gated(c, p + ".attn_gate_context", txt_mod[2], txt_o, text.rows),
                              times(text.rows, c.f.hidden));
  img_h = stream_ff(c, p, image, img_h, img_mod);
  txt_h = stream_ff(c, p, text, txt_h, txt_mod);
  return {img_h, txt_h};
}

// FluxSingleTransformerBlock (diffusers concatenates text+image on entry and
// splits on exit). Returns {image, text}.
std::pair<std::string, std::string> single_block(Context& c, int64_t i, const std::string& img,
                                                 const std::string& txt) {
  const std::string p = "single_transformer_blocks." + std::to_string(i);
  c.b.begin_block(p, "flux_single_stream", true);
  const SizeExpr rows = joint_rows(c.f);
  const SizeExpr h_elements = times(rows, c.f.hidden);
  const std::string joint = c.b.copy(p + ".concat_in", "concat", {txt, img}, h_elements);
  const std::vector<std::string> mod = modulation(c, p + ".norm", 3);
  const std::string x = modulate(c, p + ".norm.norm", joint, rows, mod[0], mod[1]);
  const std::string mlp = c.b.linear(p + ".proj_mlp", x, rows, c.f.hidden, c.f.mlp, true);
  const std::string act = c.b.activation(p + ".act_mlp", mlp, times(rows, c.f.mlp), "gelu_tanh");
  const Qkv qkv = projections(c, p + ".attn", x, rows, "to_q", "to_k", "to_v", "norm_q", "norm_k");
  const std::string o = joint_attention(c, p + ".attn", qkv.q, qkv.k, qkv.v);
  const std::string cat = c.b.copy(p + ".concat_attn_mlp", "concat", {o, act},
                                   times(rows, c.f.hidden + c.f.mlp));
  const std::string out = c.b.linear(p + ".proj_out", cat, rows, c.f.hidden + c.f.mlp, c.f.hidden, true);
  const std::string g = gated(c, p + ".gate", mod[2], out, rows);
  const std::string h = c.b.add(p + ".residual", joint, g, h_elements);
  // FluxSingleTransformerBlock.forward binds norm_hidden_states, mlp_hidden_states and
  // attn_output until it returns, and the cat of the last two until `gate *
  // self.proj_out(hidden_states)` rebinds the name; the transformer's loop holds the
  // block's two inputs until it returns (diffusers 0.39.0 transformer_flux.py). Under
  // LoRA on the attention only (proj_mlp and proj_out frozen) nothing saves the GELU's
  // output or the cat, nor, under autocast, the fp32 normed input the linears cast.
  c.b.hold_until(p + ".gate", cat);
  for (const std::string& held : {x, act, o, img, txt}) c.b.hold_until(p + ".residual", held);
  const auto parts = c.b.split(p + ".split_out", h,
                               {{p + ".out_text", times(text_rows(c.f), c.f.hidden)},
                                {p + ".out_image", times(image_rows(), c.f.hidden)}});
  return {parts[1], parts[0]};
}

// time_text_embed (CombinedTimestepGuidanceTextProjEmbeddings): sinusoidal
// projections of timestep and guidance through two-layer SiLU MLPs, plus the
// pooled CLIP text through PixArtAlphaTextProjection; summed into temb [B, 3072].
std::string time_text_embed(GraphBuilder& b, const FluxConfig& f, const std::string& pooled) {
  const SizeExpr rows = SizeExpr::per_sample(1);
  const int64_t h = f.hidden;
  auto mlp = [&](const std::string& module, const std::string& x, int64_t in, const char* act_name) {
    const std::string l1 = b.linear(module + ".linear_1", x, rows, in, h, true);
    const std::string a = b.activation(module + "." + act_name, l1, times(rows, h), "silu");
    return b.linear(module + ".linear_2", a, rows, h, h, true);
  };
  const std::string e = "time_text_embed";
  const std::string timestep = b.input("timestep", rows, DType::kF32, false);
  const std::string guidance = b.input("guidance", rows, DType::kF32, false);
  const std::string t_proj = b.copy(e + ".time_proj", "sinusoidal", {timestep}, times(rows, f.time_channels));
  const std::string g_proj = b.copy(e + ".guidance_proj", "sinusoidal", {guidance}, times(rows, f.time_channels));
  const std::string t = mlp(e + ".timestep_embedder", t_proj, f.time_channels, "act");
  const std::string g = mlp(e + ".guidance_embedder", g_proj, f.time_channels, "act");
  const std::string p = mlp(e + ".text_embedder", pooled, f.pooled_dim, "act_1");
  const std::string tg = b.add(e + ".sum_time_guidance", t, g, times(rows, h));
  return b.add(e + ".temb", tg, p, times(rows, h));
}

}  // namespace

graph::LayerGraph build_flux(const FluxConfig& config, const ZooOptions& options) {
  FluxConfig f = config;
  if (options.text_tokens) f.text_tokens = *options.text_tokens;
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);  // published bfloat16
  Context c{b, f, options, "", "", ""};
  std::string pooled;
  std::string encoded;
  if (options.precomputed_text_embeddings) {
    b.begin_block("embeddings", "flux_embedding", false);
    pooled = b.input("pooled_projections", SizeExpr::per_sample(f.pooled_dim), std::nullopt, false);
    encoded = b.input("encoder_hidden_states", times(text_rows(c.f), f.joint_dim), std::nullopt, false);
  } else {
    std::tie(pooled, encoded) = add_flux_text_encoders(b, f.text_tokens);
    b.begin_block("embeddings", "flux_embedding", false);
  }
  const std::string latents = b.input("hidden_states", times(image_rows(), f.in_channels),
                                      std::nullopt, false);
  // FluxPosEmbed: float32 cos/sin tables of [T + S, 128], not per sample.
  const std::string ids = b.input("position_ids", SizeExpr{f.text_tokens * 3, 0, 3, 0, 0, 0},
                                  DType::kF32, false);
  const SizeExpr table{f.text_tokens * f.head_dim, 0, f.head_dim, 0, 0, 0};
  c.cos = b.copy("pos_embed.cos", "rope_table", {ids}, table, DType::kF32);
  c.sin = b.copy("pos_embed.sin", "rope_table", {ids}, table, DType::kF32);
  c.temb = time_text_embed(b, f, pooled);
  std::string img = b.linear("x_embedder", latents, image_rows(), f.in_channels, f.hidden, true);
  std::string txt = b.linear("context_embedder", encoded, text_rows(c.f), f.joint_dim, f.hidden, true);
  for (int64_t i = 0; i < f.double_blocks; ++i) std::tie(img, txt) = double_block(c, i, img, txt);
  for (int64_t i = 0; i < f.single_blocks; ++i) std::tie(img, txt) = single_block(c, i, img, txt);
  // norm_out (AdaLayerNormContinuous: scale, shift), proj_out to 64 channels,
  // and the flow-matching MSE against the target (keeps the [B, S, 64] difference).
  b.begin_block("head", "flux_output", false);
  const std::vector<std::string> mod = modulation(c, "norm_out", 2);
  const std::string x = modulate(c, "norm_out.norm", img, image_rows(), mod[1], mod[0]);
  const std::string out = b.linear("proj_out", x, image_rows(), f.hidden, f.in_channels, true);
  const std::string target = b.input("target", times(image_rows(), f.in_channels), std::nullopt, false);
  const SizeExpr out_elements = times(image_rows(), f.in_channels);
  OpSpec loss{"loss", "loss", {out, target}, SizeExpr::constant(1), DType::kF32,
              {SavedRef{out, SaveWhen::kAnyGrad}, SavedRef{target, SaveWhen::kAnyGrad}}, {},
              out_elements.scaled(3), out_elements.scaled(2), {}, out_elements.scaled(4)};
  b.op(loss);
  return b.finish();
}

graph::LayerGraph build_flux_kontext(const ZooOptions& options) { return build_flux(kFluxKontextDev, options); }

}  // namespace headroom::models
