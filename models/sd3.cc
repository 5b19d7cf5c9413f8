// Stable Diffusion 3 / 3.5 transformer as diffusers SD3Transformer2DModel runs it
// (diffusers 0.39.0 transformer_sd3.py; JointTransformerBlock in attention.py;
// JointAttnProcessor2_0 in attention_processor.py): PatchEmbed (a 2x2 Conv2d and a
// cropped persistent sincos table), CombinedTimestepTextProjEmbeddings, a context
// embedder, `num_layers` joint blocks (image and text weights apart, one SDPA over
// the concatenated image+text tokens; the last block's text stream stops after
// its attention projections, context_pre_only), norm_out and proj_out.
// S = image tokens, (resolution/16)^2 (VAE factor 8, patch 2); T = 77 CLIP + the
// T5 tokens, fixed per sample.
#include "models/sd3.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models/layers.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

SizeExpr image_rows() { return tokens(); }
int64_t text_len(const Sd3Config& f) { return f.clip_tokens + f.t5_tokens; }
SizeExpr text_rows(const Sd3Config& f) { return fixed_tokens(text_len(f)); }
SizeExpr joint_rows(const Sd3Config& f) { return SizeExpr{0, text_len(f), 0, 1, 0, 0}; }
// B*(S+T)^2 = B*S^2 + 2T*B*S + T^2*B.
SizeExpr joint_scores(const Sd3Config& f) {
  const int64_t t = text_len(f);
  return SizeExpr{0, t * t, 0, 2 * t, 0, 1};
}

constexpr MmditQkvNames kImageQkv{"to_q", "to_k", "to_v", "norm_q", "norm_k"};
constexpr MmditQkvNames kTextQkv{"add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k"};

struct Context {
  MmditContext m;
  const Sd3Config& f;
};

// F.scaled_dot_product_attention over `rows` query/key rows (no mask, no
// dropout), then `transpose(1, 2).reshape(B, -1, heads * head_dim)`. The flash
// kernel's output follows q's layout (torch 2.11 attention.cu: the output is
// empty_like(query.transpose(1, 2)); the meta kernel empty_like(query)): for q in
// [B, N, H, D] memory (a view of a projection, attn2) the reshape is a view; the
// joint attention's q is torch.cat of the image and text parts along the token
// axis, a contiguous [B, H, N, D] tensor, so the reshape copies the output (as
// eager attention's always does), and the output projections read the copy.
std::string sdpa(Context& c, const std::string& attn, const MmditQkv& qkv, SizeExpr rows, SizeExpr scores,
                 bool heads_major) {
  const SizeExpr elements = times(rows, c.f.hidden);
  const AttentionShape shape = self_attention_shape(c.f.heads, c.f.heads, c.f.head_dim, rows, scores, false);
  std::string out = attention(c.m.b, c.m.options.attention, attn, qkv.q, qkv.k, qkv.v, shape,
                              EagerAttentionOptions{false, 0.0});
  if (heads_major || c.m.options.attention == AttentionImpl::kEager) {
    out = c.m.b.copy(attn + ".merge_heads", "transpose_contiguous", {out}, elements);
  }
  return out;
}

struct JointOut {
  std::string image, text;
  std::string merged;  // the attention output both slices are views of
};

// JointAttnProcessor2_0: image and text q/k/v, cat image-first on the token
// axis, one SDPA, split back; to_add_out (unless context_pre_only) then to_out.0,
// each reading its slice (a view) of the attention output.
JointOut joint_attention(Context& c, const std::string& attn, const std::string& img_x, const std::string& txt_x,
                         bool pre_only) {
  GraphBuilder& b = c.m.b;
  const SizeExpr image = image_rows();
  const SizeExpr text = text_rows(c.f);
  const MmditQkv iq = mmdit_projections(c.m, attn, img_x, image, kImageQkv);
  const MmditQkv tq = mmdit_projections(c.m, attn, txt_x, text, kTextQkv);
  const SizeExpr joint = times(joint_rows(c.f), c.f.hidden);
  const MmditQkv cat{b.copy(attn + ".cat_q", "concat", {iq.q, tq.q}, joint),
                     b.copy(attn + ".cat_k", "concat", {iq.k, tq.k}, joint),
                     b.copy(attn + ".cat_v", "concat", {iq.v, tq.v}, joint)};
  const std::string o = sdpa(c, attn, cat, joint_rows(c.f), joint_scores(c.f), true);
  const auto parts = b.split(attn + ".split_out", o,
                             {{attn + ".out_image", times(image, c.f.hidden)},
                              {attn + ".out_text", times(text, c.f.hidden)}});
  std::string txt_o;
  if (!pre_only) {
    txt_o = mmdit_linear_on_view(c.m, attn + ".to_add_out", parts[1], o, text, c.f.hidden, c.f.hidden);
  }
  const std::string img_o = mmdit_linear_on_view(c.m, attn + ".to_out.0", parts[0], o, image, c.f.hidden, c.f.hidden);
  return {img_o, txt_o, o};
}

// attn2 of a dual-attention block (SD3.5 MMDiT-X): self-attention over the image
// tokens only, on the second modulation of the same LayerNorm output.
std::string image_attention(Context& c, const std::string& attn, const std::string& x) {
  const MmditQkv qkv = mmdit_projections(c.m, attn, x, image_rows(), kImageQkv);
  const std::string o = sdpa(c, attn, qkv, image_rows(), SizeExpr{0, 0, 0, 0, 0, 1}, false);
  return c.m.b.linear(attn + ".to_out.0", o, image_rows(), c.f.hidden, c.f.hidden, true);
}

bool is_dual(const Sd3Config& f, int64_t i) {
  return std::find(f.dual_attention_layers.begin(), f.dual_attention_layers.end(), i) !=
         f.dual_attention_layers.end();
}

struct BlockLocals {
  std::string img, txt;  // the block's arguments
  std::string img_x, img_x2, txt_x;  // norm1's and norm1_context's modulated outputs ("" when absent)
  std::string merged;    // the joint attention output
};

// What JointTransformerBlock.forward (diffusers 0.39.0 attention.py) keeps bound
// past its last reader, and until when. SD3Transformer2DModel.forward's loop
// (transformer_sd3.py) passes hidden_states and encoder_hidden_states by name, so
// both arguments live until the block returns. `attn_output`, `norm_hidden_states2`,
// `attn_output2` and the feed-forward's `norm_hidden_states` are never rebound; the
// first `norm_hidden_states` is rebound by norm2's output, which lives through the
// scale-and-shift that rebinds it. In the context_pre_only block the processor
// returns the text slice of the attention output unprojected: `context_attn_output`,
// a view, keeps the whole [B, S+T, hidden] output, and `norm_encoder_hidden_states`
// is never rebound. Otherwise `ff_output` and the gated `context_attn_output` live
// through the text stream, `norm_encoder_hidden_states` until norm2_context rebinds
// it, and the text feed-forward's input and output until the last add.
void hold_block_locals(Context& c, const std::string& p, const BlockLocals& l, bool pre_only) {
  GraphBuilder& b = c.m.b;
  const std::string end = p + (pre_only ? ".ff.residual" : ".ff_context.residual");
  std::vector<std::string> to_end{l.img, l.txt, p + ".attn_gate", p + ".norm2.shift"};
  if (!l.img_x2.empty()) {
    to_end.push_back(l.img_x2);
    to_end.push_back(p + ".attn2_gate");
  }
  if (pre_only) {
    to_end.push_back(l.txt_x);
    to_end.push_back(l.merged);
  } else {
    for (const char* s : {".ff.gate", ".attn_gate_context", ".norm2_context.shift", ".ff_context.net.2"}) {
      to_end.push_back(p + s);
    }
    b.hold_until(p + ".norm2_context", l.txt_x);
    b.hold_until(p + ".norm2_context.shift", p + ".norm2_context");
  }
  for (const std::string& held : to_end) b.hold_until(end, held);
  b.hold_until(p + ".norm2", l.img_x);
  b.hold_until(p + ".norm2.shift", p + ".norm2");
}

// JointTransformerBlock.forward, in its order. Returns {image, text} ("" text
// after the context_pre_only block).
std::pair<std::string, std::string> joint_block(Context& c, int64_t i, const std::string& img,
                                                const std::string& txt) {
  GraphBuilder& b = c.m.b;
  const std::string p = "transformer_blocks." + std::to_string(i);
  b.begin_block(p, "sd3_joint", true);
  const bool dual = is_dual(c.f, i);
  const bool pre_only = i == c.f.layers - 1;
  const SizeExpr image = image_rows();
  const SizeExpr text = text_rows(c.f);
  // norm1: AdaLayerNormZero (6 chunks) or SD35AdaLayerNormZeroX (9: a second
  // shift/scale/gate for attn2 on the same normed input).
  const std::vector<std::string> im = mmdit_modulation(c.m, p + ".norm1", dual ? 9 : 6);
  const std::string normed = b.norm(p + ".norm1.norm", img, image, c.f.hidden, NormKind::kLayerNorm, false, false);
  const std::string img_x = mmdit_scale_shift(c.m, p + ".norm1.norm", normed, image, im[0], im[1]);
  const std::string img_x2 = dual ? mmdit_scale_shift(c.m, p + ".norm1.norm_msa2", normed, image, im[6], im[7]) : "";
  // norm1_context: AdaLayerNormContinuous (scale, shift) in the last block.
  const std::vector<std::string> tm = mmdit_modulation(c.m, p + ".norm1_context", pre_only ? 2 : 6);
  const std::string txt_x = pre_only ? mmdit_modulate(c.m, p + ".norm1_context.norm", txt, text, tm[1], tm[0])
                                     : mmdit_modulate(c.m, p + ".norm1_context.norm", txt, text, tm[0], tm[1]);
  const JointOut o = joint_attention(c, p + ".attn", img_x, txt_x, pre_only);
  std::string img_h = mmdit_gated_residual(c.m, p + ".attn_gate", p + ".attn_residual", img, im[2], o.image, image);
  if (dual) {
    const std::string o2 = image_attention(c, p + ".attn2", img_x2);
    img_h = mmdit_gated_residual(c.m, p + ".attn2_gate", p + ".attn2_residual", img_h, im[8], o2, image);
  }
  img_h = mmdit_feed_forward(c.m, p + ".norm2", p + ".ff", img_h, image, im);
  if (pre_only) {
    hold_block_locals(c, p, BlockLocals{img, txt, img_x, img_x2, txt_x, o.merged}, true);
    return {img_h, ""};
  }
  std::string txt_h = mmdit_gated_residual(c.m, p + ".attn_gate_context", p + ".attn_residual_context", txt,
                                           tm[2], o.text, text);
  txt_h = mmdit_feed_forward(c.m, p + ".norm2_context", p + ".ff_context", txt_h, text, tm);
  hold_block_locals(c, p, BlockLocals{img, txt, img_x, img_x2, txt_x, o.merged}, false);
  return {img_h, txt_h};
}

// PatchEmbed: Conv2d(in, hidden, kernel = stride = patch) over the latents (a
// linear over patches), flattened, plus the centre crop of the persistent
// [1, pos_embed_max^2, hidden] sincos buffer (cropped_pos_embed).
std::string patch_embed(GraphBuilder& b, const Sd3Config& f) {
  const int64_t patch_values = f.in_channels * f.patch * f.patch;
  const std::string latents = b.input("hidden_states", times(image_rows(), patch_values), std::nullopt, false);
  OpSpec conv;
  conv.name = "pos_embed.proj";
  conv.op = "conv2d";
  conv.inputs = {latents};
  conv.out_elements = times(image_rows(), f.hidden);
  conv.saves = {SavedRef{latents, SaveWhen::kParamGrad}};
  conv.params = {b.param("pos_embed.proj.weight", {f.hidden, f.in_channels, f.patch, f.patch}),
                 b.param("pos_embed.proj.bias", {f.hidden})};
  conv.fwd_flops = image_rows().scaled(2 * patch_values * f.hidden);
  conv.bwd_param_flops = conv.fwd_flops;
  const std::string patches = b.op(conv);
  const SizeExpr h = times(image_rows(), f.hidden);
  OpSpec pos{"pos_embed.add", "add", {patches}, h, std::nullopt, {}, {}, h, {}, {}, {}};
  Param table = b.param("pos_embed.pos_embed", {1, f.pos_embed_max * f.pos_embed_max, f.hidden});
  table.trainable = false;
  table.buffer = true;  // register_buffer(..., persistent=True): in the checkpoint, never a parameter
  pos.params = {table};
  return b.op(pos);
}

// CombinedTimestepTextProjEmbeddings: Timesteps(256) -> TimestepEmbedding, plus
// the pooled CLIP text through PixArtAlphaTextProjection; summed into temb.
std::string time_text_embed(GraphBuilder& b, const Sd3Config& f, const std::string& pooled) {
  const SizeExpr rows = SizeExpr::per_sample(1);
  const std::string e = "time_text_embed";
  const std::string timestep = b.input("timestep", rows, DType::kF32, false);
  const std::string t_proj = b.copy(e + ".time_proj", "sinusoidal", {timestep}, times(rows, f.time_channels));
  const std::string t = mmdit_embed_mlp(b, f.hidden, e + ".timestep_embedder", t_proj, f.time_channels, "act");
  const std::string p = mmdit_embed_mlp(b, f.hidden, e + ".text_embedder", pooled, f.pooled_dim, "act_1");
  return b.add(e + ".temb", t, p, times(rows, f.hidden));
}

}  // namespace

Sd3Config sd3_default_config() {
  Sd3Config f;
  f.heads = 18;
  f.head_dim = 64;
  f.hidden = f.heads * f.head_dim;
  f.layers = 18;
  f.in_channels = 16;
  f.out_channels = 16;
  f.patch = 2;
  f.joint_dim = 4096;
  f.pooled_dim = 2048;
  f.mlp = 4 * f.hidden;
  f.time_channels = 256;
  f.pos_embed_max = 96;
  f.clip_tokens = 77;
  f.t5_tokens = 77;
  return f;
}

namespace {
Sd3Config sized(int64_t heads, int64_t layers, int64_t pos_embed_max, QkNorm qk_norm) {
  Sd3Config f = sd3_default_config();
  f.heads = heads;
  f.hidden = heads * f.head_dim;
  f.mlp = 4 * f.hidden;
  f.layers = layers;
  f.pos_embed_max = pos_embed_max;
  f.qk_norm = qk_norm;
  return f;
}
}  // namespace

// 24 heads x 64, 24 layers, pos_embed_max_size 192, no qk norm.
Sd3Config sd3_medium_config() { return sized(24, 24, 192, QkNorm::kNone); }
// 24 x 64, 24 layers, pos_embed_max_size 384, rms_norm, attn2 in blocks 0-12.
Sd3Config sd35_medium_config() {
  Sd3Config f = sized(24, 24, 384, QkNorm::kDiffusers);
  for (int64_t i = 0; i <= 12; ++i) f.dual_attention_layers.push_back(i);
  return f;
}
// 38 x 64, 38 layers, pos_embed_max_size 192, rms_norm.
Sd3Config sd35_large_config() { return sized(38, 38, 192, QkNorm::kDiffusers); }

graph::LayerGraph build_sd3(const Sd3Config& config, const ZooOptions& options) {
  Sd3Config f = config;
  if (options.text_tokens) f.t5_tokens = *options.text_tokens;
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);  // the published checkpoints' dtype
  Context c{MmditContext{b, MmditDims{f.hidden, f.heads, f.head_dim, f.mlp, f.qk_norm}, options, ""}, f};
  // The training script's precomputed prompt embeddings: CLIP-L and CLIP-G
  // penultimate states (77 tokens, padded to joint_dim) cat T5's, and the pooled pair.
  b.begin_block("embeddings", "sd3_embedding", false);
  const std::string pooled = b.input("pooled_projections", SizeExpr::per_sample(f.pooled_dim), std::nullopt, false);
  const std::string encoded = b.input("encoder_hidden_states", times(text_rows(f), f.joint_dim), std::nullopt, false);
  std::string img = patch_embed(b, f);
  c.m.temb = time_text_embed(b, f, pooled);
  std::string txt = b.linear("context_embedder", encoded, text_rows(f), f.joint_dim, f.hidden, true);
  for (int64_t i = 0; i < f.layers; ++i) std::tie(img, txt) = joint_block(c, i, img, txt);
  // norm_out (AdaLayerNormContinuous), proj_out to patch^2 x out_channels, and the
  // flow-matching MSE of train_dreambooth_lora_sd3.py against the target.
  b.begin_block("head", "sd3_output", false);
  const std::vector<std::string> mod = mmdit_modulation(c.m, "norm_out", 2);
  const std::string x = mmdit_modulate(c.m, "norm_out.norm", img, image_rows(), mod[1], mod[0]);
  const int64_t out_values = f.patch * f.patch * f.out_channels;
  const std::string out = b.linear("proj_out", x, image_rows(), f.hidden, out_values, true);
  mmdit_flow_matching_loss(b, out, times(image_rows(), out_values));
  return b.finish();
}

}  // namespace headroom::models
