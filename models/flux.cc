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
#include "models/mmdit_parts.h"
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
  MmditContext m;
  const FluxConfig& f;
  std::string cos;
  std::string sin;
};

MmditDims flux_dims(const FluxConfig& f) {
  return MmditDims{f.hidden, f.heads, f.head_dim, f.mlp, f.python_qk_norm ? QkNorm::kPython : QkNorm::kFused};
}

// RoPE on joint q and k (diffusers apply_rotary_emb computes in f32 and casts
// back: transients only; cos/sin are persistent), then attention over T+S.
std::string joint_attention(Context& c, const std::string& attn, const std::string& q,
                            const std::string& k, const std::string& v) {
  GraphBuilder& b = c.m.b;
  const SizeExpr elements = times(joint_rows(c.f), c.f.hidden);
  const std::string q_rope = apply_rope(b, attn + ".q", q, c.cos, c.sin, elements);
  const std::string k_rope = apply_rope(b, attn + ".k", k, c.cos, c.sin, elements);
  AttentionShape shape = self_attention_shape(c.f.heads, c.f.heads, c.f.head_dim,
                                              joint_rows(c.f), joint_scores(c.f), false);
  const double p = dropout_p(c.m.options, 0.0);
  std::string out = attention(b, c.m.options.attention, attn, q_rope, k_rope, v, shape,
                              EagerAttentionOptions{false, p});
  if (c.m.options.attention == AttentionImpl::kEager) {
    out = b.copy(attn + ".merge_heads", "transpose_contiguous", {out}, elements);
  }
  return out;
}

constexpr MmditQkvNames kImageQkv{"to_q", "to_k", "to_v", "norm_q", "norm_k"};
constexpr MmditQkvNames kTextQkv{"add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k"};

// FluxTransformerBlock. Returns {image, text} hidden states.
std::pair<std::string, std::string> double_block(Context& c, int64_t i, const std::string& img,
                                                 const std::string& txt) {
  GraphBuilder& b = c.m.b;
  const std::string p = "transformer_blocks." + std::to_string(i);
  b.begin_block(p, "flux_double_stream", true);
  const SizeExpr image = image_rows();
  const SizeExpr text = text_rows(c.f);
  const std::vector<std::string> img_mod = mmdit_modulation(c.m, p + ".norm1", 6);
  const std::vector<std::string> txt_mod = mmdit_modulation(c.m, p + ".norm1_context", 6);
  const std::string img_x = mmdit_modulate(c.m, p + ".norm1.norm", img, image, img_mod[0], img_mod[1]);
  const std::string txt_x = mmdit_modulate(c.m, p + ".norm1_context.norm", txt, text, txt_mod[0], txt_mod[1]);
  const std::string attn = p + ".attn";
  const MmditQkv iq = mmdit_projections(c.m, attn, img_x, image, kImageQkv);
  const MmditQkv tq = mmdit_projections(c.m, attn, txt_x, text, kTextQkv);
  const SizeExpr joint = times(joint_rows(c.f), c.f.hidden);
  const std::string q = b.copy(attn + ".cat_q", "concat", {tq.q, iq.q}, joint);
  const std::string k = b.copy(attn + ".cat_k", "concat", {tq.k, iq.k}, joint);
  const std::string v = b.copy(attn + ".cat_v", "concat", {tq.v, iq.v}, joint);
  const std::string o = joint_attention(c, attn, q, k, v);
  const auto parts = b.split(attn + ".split_out", o,
                             {{attn + ".out_text", times(text, c.f.hidden)},
                              {attn + ".out_image", times(image, c.f.hidden)}});
  const std::string img_o = mmdit_linear_on_view(c.m, attn + ".to_out.0", parts[1], o, image,
                                                 c.f.hidden, c.f.hidden);
  const std::string txt_o = mmdit_linear_on_view(c.m, attn + ".to_add_out", parts[0], o, text,
                                                 c.f.hidden, c.f.hidden);
  std::string img_h = mmdit_gated_residual(c.m, p + ".attn_gate", p + ".attn_residual", img, img_mod[2], img_o, image);
  std::string txt_h = mmdit_gated_residual(c.m, p + ".attn_gate_context", p + ".attn_residual_context", txt,
                                           txt_mod[2], txt_o, text);
  img_h = mmdit_feed_forward(c.m, p + ".norm2", p + ".ff", img_h, image, img_mod);
  txt_h = mmdit_feed_forward(c.m, p + ".norm2_context", p + ".ff_context", txt_h, text, txt_mod);
  return {img_h, txt_h};
}

// FluxSingleTransformerBlock (diffusers concatenates text+image on entry and
// splits on exit). Returns {image, text}.
std::pair<std::string, std::string> single_block(Context& c, int64_t i, const std::string& img,
                                                 const std::string& txt) {
  GraphBuilder& b = c.m.b;
  const std::string p = "single_transformer_blocks." + std::to_string(i);
  b.begin_block(p, "flux_single_stream", true);
  const SizeExpr rows = joint_rows(c.f);
  const SizeExpr h_elements = times(rows, c.f.hidden);
  const std::string joint = b.copy(p + ".concat_in", "concat", {txt, img}, h_elements);
  const std::vector<std::string> mod = mmdit_modulation(c.m, p + ".norm", 3);
  const std::string x = mmdit_modulate(c.m, p + ".norm.norm", joint, rows, mod[0], mod[1]);
  const std::string mlp = b.linear(p + ".proj_mlp", x, rows, c.f.hidden, c.f.mlp, true);
  const std::string act = b.activation(p + ".act_mlp", mlp, times(rows, c.f.mlp), "gelu_tanh");
  const MmditQkv qkv = mmdit_projections(c.m, p + ".attn", x, rows, kImageQkv);
  const std::string o = joint_attention(c, p + ".attn", qkv.q, qkv.k, qkv.v);
  const std::string cat = b.copy(p + ".concat_attn_mlp", "concat", {o, act},
                                   times(rows, c.f.hidden + c.f.mlp));
  const std::string out = b.linear(p + ".proj_out", cat, rows, c.f.hidden + c.f.mlp, c.f.hidden, true);
  const std::string h = mmdit_gated_residual(c.m, p + ".gate", p + ".residual", joint, mod[2], out, rows);
  // FluxSingleTransformerBlock.forward binds norm_hidden_states, mlp_hidden_states and
  // attn_output until it returns, and the cat of the last two until `gate *
  // self.proj_out(hidden_states)` rebinds the name; the transformer's loop holds the
  // block's two inputs until it returns (diffusers 0.39.0 transformer_flux.py). Under
  // LoRA on the attention only (proj_mlp and proj_out frozen) nothing saves the GELU's
  // output or the cat, nor, under autocast, the fp32 normed input the linears cast.
  b.hold_until(p + ".gate", cat);
  for (const std::string& held : {x, act, o, img, txt}) b.hold_until(p + ".residual", held);
  const auto parts = b.split(p + ".split_out", h,
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
  const std::string e = "time_text_embed";
  const std::string timestep = b.input("timestep", rows, DType::kF32, false);
  const std::string guidance = b.input("guidance", rows, DType::kF32, false);
  const std::string t_proj = b.copy(e + ".time_proj", "sinusoidal", {timestep}, times(rows, f.time_channels));
  const std::string g_proj = b.copy(e + ".guidance_proj", "sinusoidal", {guidance}, times(rows, f.time_channels));
  const std::string t = mmdit_embed_mlp(b, h, e + ".timestep_embedder", t_proj, f.time_channels, "act");
  const std::string g = mmdit_embed_mlp(b, h, e + ".guidance_embedder", g_proj, f.time_channels, "act");
  const std::string p = mmdit_embed_mlp(b, h, e + ".text_embedder", pooled, f.pooled_dim, "act_1");
  const std::string tg = b.add(e + ".sum_time_guidance", t, g, times(rows, h));
  return b.add(e + ".temb", tg, p, times(rows, h));
}

}  // namespace

graph::LayerGraph build_flux(const FluxConfig& config, const ZooOptions& options) {
  FluxConfig f = config;
  if (options.text_tokens) f.text_tokens = *options.text_tokens;
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);  // published bfloat16
  Context c{MmditContext{b, flux_dims(f), options, ""}, f, "", ""};
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
  c.m.temb = time_text_embed(b, f, pooled);
  std::string img = b.linear("x_embedder", latents, image_rows(), f.in_channels, f.hidden, true);
  std::string txt = b.linear("context_embedder", encoded, text_rows(c.f), f.joint_dim, f.hidden, true);
  for (int64_t i = 0; i < f.double_blocks; ++i) std::tie(img, txt) = double_block(c, i, img, txt);
  for (int64_t i = 0; i < f.single_blocks; ++i) std::tie(img, txt) = single_block(c, i, img, txt);
  // norm_out (AdaLayerNormContinuous: scale, shift), proj_out to 64 channels,
  // and the flow-matching MSE against the target (keeps the [B, S, 64] difference).
  b.begin_block("head", "flux_output", false);
  const std::vector<std::string> mod = mmdit_modulation(c.m, "norm_out", 2);
  const std::string x = mmdit_modulate(c.m, "norm_out.norm", img, image_rows(), mod[1], mod[0]);
  const std::string out = b.linear("proj_out", x, image_rows(), f.hidden, f.in_channels, true);
  mmdit_flow_matching_loss(b, out, times(image_rows(), f.in_channels));
  return b.finish();
}

graph::LayerGraph build_flux_kontext(const ZooOptions& options) { return build_flux(kFluxKontextDev, options); }

}  // namespace headroom::models
