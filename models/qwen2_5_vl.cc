// Qwen2.5-VL as transformers 5.23.0 runs it (modeling_qwen2_5_vl.py): what each
// module keeps for backward, with the line of the modeling file it follows.
#include "models/qwen2_5_vl.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "graph/op_traits.h"
#include "models/layers.h"

namespace headroom::models {
namespace {

std::string block_prefix(int64_t i) { return "model.visual.blocks." + std::to_string(i); }

bool is_full_attention(const Qwen25VlVision& v, int64_t block) {
  return std::find(v.full_attention_blocks.begin(), v.full_attention_blocks.end(), block) !=
         v.full_attention_blocks.end();
}

// Qwen2_5_VisionPatchEmbed: pixel_values [patches, 3 * 2 * 14 * 14] in float32 (the
// image processor's), cast to the tower's dtype (get_image_features:
// pixel_values.type(self.visual.dtype)); Conv3d with kernel = stride, no bias: a
// linear over each patch that keeps its (cast) input for the weight's gradient.
// Then permute_input_for_window_attn reorders the rows (an index: a new tensor).
std::string add_patch_embed(GraphBuilder& b, const Qwen25VlVision& v, SizeExpr rows) {
  const int64_t patch_values = 3 * v.temporal_patch * v.patch * v.patch;
  const std::string pixels = b.input("pixel_values", times(rows, patch_values), DType::kF32, false);
  const std::string cast = b.copy("model.visual.patch_embed.cast", std::string(graph::op::kToCopy), {pixels}, times(rows, patch_values));
  OpSpec conv;
  conv.name = "model.visual.patch_embed.proj";
  conv.op = graph::op::kConv3d;  // on autocast's 16-bit list (graph/op_traits.cc)
  conv.inputs = {cast};
  conv.out_elements = times(rows, v.hidden);
  conv.saves = {SavedRef{cast, SaveWhen::kParamGrad}};
  conv.params = {b.param(conv.name + ".weight", {v.hidden, 3, v.temporal_patch, v.patch, v.patch})};
  conv.fwd_flops = rows.scaled(2 * patch_values * v.hidden);
  conv.bwd_param_flops = conv.fwd_flops;
  const std::string patches = b.op(conv);
  return b.copy("model.visual.window_permute", "index", {patches}, times(rows, v.hidden));
}

struct VisionRope {
  std::string cos, sin;
};

// Qwen2_5_VLVisionRotaryEmbedding under no_grad: f32 cos and sin of [patches,
// head_dim] from the (h, w) position ids, then permuted into window order.
VisionRope add_vision_rope(GraphBuilder& b, const Qwen25VlVision& v, SizeExpr rows) {
  const int64_t head_dim = v.hidden / v.heads;
  const std::string ids = b.input("model.visual.position_ids", times(rows, 2), DType::kInt64, false);
  VisionRope out;
  for (const char* part : {"cos", "sin"}) {
    const std::string name = std::string("model.visual.rotary_pos_emb.") + part;
    const std::string table = b.copy(name, "rope_table", {ids}, times(rows, head_dim), DType::kF32);
    const std::string permuted = b.copy(name + ".window_permute", "index", {table}, times(rows, head_dim), DType::kF32);
    (std::string(part) == "cos" ? out.cos : out.sin) = permuted;
  }
  return out;
}

// Qwen2_5_VLVisionAttention: qkv (bias) unbound into q, k, v (views); q and k to
// float32, rotated (apply_rotary_pos_emb_vision: the products keep only cos and
// sin) and cast back. SDPA and eager run once per window (cu_seqlens: the windows,
// or the whole image in fullatt_block_indexes); the fused kernels and eager's
// probabilities-by-v matmul keep v as given, a view of qkv's output, which keeps all
// of it (traced by scripts/exporter under both). torch.cat joins the windows'
// outputs (a new tensor) before proj.
std::string add_vision_attention(GraphBuilder& b, const Qwen25VlConfig& c, int64_t i, const std::string& x,
                                 const VisionRope& rope, const ZooOptions& options) {
  const Qwen25VlVision& v = c.vision;
  const std::string p = block_prefix(i) + ".attn";
  const SizeExpr rows = fixed_tokens(c.image.patches());
  const SizeExpr h_elements = times(rows, v.hidden);
  const std::string qkv = b.linear(p + ".qkv", x, rows, v.hidden, 3 * v.hidden, true);
  // v stays a view of qkv's output, which every kernel keeps whole (below).
  const auto parts = b.split(p + ".unbind", qkv, {{p + ".query", h_elements}, {p + ".key", h_elements}});
  std::string rotated[2];
  for (int j = 0; j < 2; ++j) {
    const std::string name = p + (j == 0 ? ".q" : ".k");
    const std::string f32 = b.copy(name + ".float", std::string(graph::op::kToCopy), {parts[j]}, h_elements, DType::kF32);
    rotated[j] = apply_rope(b, name, f32, rope.cos, rope.sin, h_elements);
  }
  const SizeExpr scores = is_full_attention(v, i) ? fixed_square(c.image.patches())
                                                  : fixed_tokens(qwen25vl_window_scores(v, c.image));
  const AttentionShape shape = self_attention_shape(v.heads, v.heads, v.hidden / v.heads, rows, scores, false);
  const bool eager = options.attention == AttentionImpl::kEager;
  std::string out = attention(b, options.attention, p, rotated[0], rotated[1], qkv, shape,
                              EagerAttentionOptions{true, 0.0});
  if (eager) out = b.copy(p + ".transpose_contiguous", "transpose_contiguous", {out}, h_elements);
  out = b.copy(p + ".cat_windows", "concat", {out}, h_elements);
  return b.linear(p + ".proj", out, rows, v.hidden, v.hidden, true);
}

// Qwen2_5_VLVisionBlock: x + attn(norm1(x)), then x + mlp(norm2(x)); Qwen2_5_VLMLP
// with biases: down(silu(gate(x)) * up(x)). The norms are Qwen2_5_VLRMSNorm (Python ops).
std::string add_vision_block(GraphBuilder& b, const Qwen25VlConfig& c, int64_t i, const std::string& hidden,
                             const VisionRope& rope, const ZooOptions& options) {
  const Qwen25VlVision& v = c.vision;
  const std::string p = block_prefix(i);
  const SizeExpr rows = fixed_tokens(c.image.patches());
  const SizeExpr h_elements = times(rows, v.hidden);
  const SizeExpr mlp_elements = times(rows, v.mlp);
  b.begin_block(p, "vision_layer", true);
  const std::string x = add_rms_norm(b, RmsNormStyle::kTransformers, p + ".norm1", hidden, rows, v.hidden);
  const std::string attn = add_vision_attention(b, c, i, x, rope, options);
  const std::string h = b.add(p + ".residual_attn", hidden, attn, h_elements);
  const std::string y = add_rms_norm(b, RmsNormStyle::kTransformers, p + ".norm2", h, rows, v.hidden);
  const std::string gate = b.linear(p + ".mlp.gate_proj", y, rows, v.hidden, v.mlp, true);
  const std::string up = b.linear(p + ".mlp.up_proj", y, rows, v.hidden, v.mlp, true);
  const std::string act = b.activation(p + ".mlp.act_fn", gate, mlp_elements, "silu");
  const std::string prod = b.mul(p + ".mlp.act_mul_up", act, up, mlp_elements);
  const std::string down = b.linear(p + ".mlp.down_proj", prod, rows, v.mlp, v.hidden, true);
  return b.add(p + ".residual_mlp", h, down, h_elements);
}

// Qwen2_5_VLPatchMerger: ln_q (RMSNorm), view(-1, hidden * 4), Linear, GELU (exact),
// Linear to the LM's width; then merged[reverse_indices] back into image order (a
// new tensor), and get_image_features' torch.cat of the per-image split (another).
std::string add_merger(GraphBuilder& b, const Qwen25VlConfig& c, const std::string& hidden) {
  const Qwen25VlVision& v = c.vision;
  const int64_t tokens = qwen25vl_image_tokens(c);
  const SizeExpr rows = fixed_tokens(tokens);
  const int64_t width = v.hidden * v.merge * v.merge;
  b.begin_block("model.visual.merger", "projector", false);
  const std::string x =
      add_rms_norm(b, RmsNormStyle::kTransformers, "model.visual.merger.ln_q", hidden, fixed_tokens(c.image.patches()),
                   v.hidden);
  const std::string h = b.linear("model.visual.merger.mlp.0", x, rows, width, width, true);
  const std::string act = b.activation("model.visual.merger.mlp.1", h, times(rows, width), "gelu");
  const std::string out = b.linear("model.visual.merger.mlp.2", act, rows, width, v.out_hidden, true);
  const std::string ordered =
      b.copy("model.visual.merger.reverse_index", "index", {out}, times(rows, v.out_hidden));
  return b.copy("model.image_embeds.cat", "concat", {ordered}, times(rows, v.out_hidden));
}

// Qwen2_5_VLRotaryEmbedding: cos and sin of [B, S, head_dim] in the embeddings'
// dtype from the (3, B, S) M-RoPE position ids (one per sample, unlike Llama's [1, S]).
std::pair<std::string, std::string> add_text_rope(GraphBuilder& b, int64_t head_dim) {
  const std::string ids = b.input("model.language_model.position_ids", tokens().scaled(3), DType::kInt64, false);
  const std::string cos = b.copy("model.language_model.rotary_emb.cos", "rope_table", {ids}, times(tokens(), head_dim));
  const std::string sin = b.copy("model.language_model.rotary_emb.sin", "rope_table", {ids}, times(tokens(), head_dim));
  return {cos, sin};
}

}  // namespace

Qwen25VlImage qwen25vl_image(int64_t height, int64_t width, const Qwen25VlVision& vision, int64_t min_pixels,
                             int64_t max_pixels) {
  const double factor = static_cast<double>(vision.patch * vision.merge);
  const double h = static_cast<double>(height);
  const double w = static_cast<double>(width);
  // Python's round() rounds halves to even, as std::nearbyint does in the default mode.
  double h_bar = std::nearbyint(h / factor) * factor;
  double w_bar = std::nearbyint(w / factor) * factor;
  if (h_bar * w_bar > static_cast<double>(max_pixels)) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    h_bar = std::max(factor, std::floor(h / beta / factor) * factor);
    w_bar = std::max(factor, std::floor(w / beta / factor) * factor);
  } else if (h_bar * w_bar < static_cast<double>(min_pixels)) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = std::ceil(h * beta / factor) * factor;
    w_bar = std::ceil(w * beta / factor) * factor;
  }
  Qwen25VlImage image;
  image.height = static_cast<int64_t>(h_bar);
  image.width = static_cast<int64_t>(w_bar);
  image.grid_h = image.height / vision.patch;
  image.grid_w = image.width / vision.patch;
  return image;
}

int64_t qwen25vl_image_tokens(const Qwen25VlConfig& config) {
  return config.image.patches() / (config.vision.merge * config.vision.merge);
}

int64_t qwen25vl_window_scores(const Qwen25VlVision& v, const Qwen25VlImage& image) {
  // Windows of `side` x `side` merged units (window_size // merge // patch); the last
  // window along an axis holds the remainder. Each unit is merge^2 patches.
  const int64_t side = std::max<int64_t>(1, v.window / v.merge / v.patch);
  const auto squares = [side](int64_t units) {
    const int64_t full = units / side;
    const int64_t rest = units % side;
    return full * side * side + rest * rest;
  };
  const int64_t unit = v.merge * v.merge;
  return squares(image.grid_h / v.merge) * squares(image.grid_w / v.merge) * unit * unit;
}

graph::LayerGraph build_qwen25vl(const Qwen25VlConfig& config, const ZooOptions& options) {
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);
  const Qwen25VlVision& v = config.vision;
  const SizeExpr rows = fixed_tokens(config.image.patches());
  LlamaConfig lm = config.text;
  if (options.rms_norm_f32_normalized && lm.rms_norm == RmsNormStyle::kTransformers) {
    lm.rms_norm = RmsNormStyle::kTransformersF32;
  }
  // Qwen2_5_VLModel.forward looks the tokens up before it runs the vision tower
  // (modeling_qwen2_5_vl.py 5.23.0: get_input_embeddings()(input_ids), then
  // get_image_features): autograd runs the lookup's backward last, after the tower's,
  // and the gradient of inputs_embeds that masked_scatter's backward makes waits
  // through the whole tower's backward for it.
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", tokens(), DType::kInt64, false);
  const std::string text_embeds =
      b.embedding("model.language_model.embed_tokens", ids, tokens(), lm.vocab, lm.hidden);
  b.begin_block("vision_embeddings", "vision_embedding", false);
  std::string hidden = add_patch_embed(b, v, rows);
  const VisionRope rope = add_vision_rope(b, v, rows);
  for (int64_t i = 0; i < v.layers; ++i) hidden = add_vision_block(b, config, i, hidden, rope, options);
  const std::string image_embeds = add_merger(b, config, hidden);

  // inputs_embeds.masked_scatter(image_mask, image_embeds): a new [B, S, hidden]
  // tensor; its backward needs only the boolean mask.
  const std::string embeds = b.copy("model.merge_image_features", "masked_scatter", {text_embeds, image_embeds},
                                    times(tokens(), lm.hidden));
  const int64_t head_dim = lm.head_dim > 0 ? lm.head_dim : lm.hidden / lm.heads;
  const auto [cos, sin] = add_text_rope(b, head_dim);
  const std::string out = add_llama_layers(b, lm, "model.language_model", embeds, cos, sin, options);
  add_causal_lm_head(b, "model.language_model.norm", "lm_head", out, lm.hidden, lm.vocab, lm.rms_norm);
  graph::LayerGraph graph = b.finish();
  if (lm.tie_embeddings) tie_parameter(graph, "lm_head.weight", "model.language_model.embed_tokens.weight");
  return graph;
}

Qwen25VlConfig qwen25vl_7b_config(const ZooOptions& options) {
  // Qwen/Qwen2.5-VL-7B-Instruct config.json: hidden_size 3584, intermediate_size
  // 18944, 28 layers, 28 heads, 4 KV heads, vocab_size 152064, max_position_embeddings
  // 128000, tie_word_embeddings false; vision_config: depth 32, hidden_size 1280,
  // intermediate_size 3420, num_heads 16, out_hidden_size 3584, window_size 112,
  // fullatt_block_indexes [7, 15, 23, 31].
  Qwen25VlConfig c;
  c.text = LlamaConfig{3584, 18944, 28, 28, 4, 152064, 128000, 0.0};
  c.text.qkv_bias = true;
  c.text.rms_norm = RmsNormStyle::kTransformers;
  c.text.rope_cache = RopeCacheStyle{};
  const int64_t side = options.image_side.value_or(kQwen25VlDefaultSide);
  c.image = qwen25vl_image(side, side, c.vision);
  return c;
}

void set_qwen25vl_metadata(graph::LayerGraph& graph, const Qwen25VlConfig& config) {
  const int64_t image_tokens = qwen25vl_image_tokens(config);
  graph.family = "qwen2_5_vl";
  graph.sequence.unit = "tokens";
  // S is the whole LM sequence; the image takes extra_tokens of it, and patch_px
  // says the builder took --resolution (planner/predict/model_context.cc).
  graph.sequence.extra_tokens = image_tokens;
  graph.sequence.patch_px = config.vision.patch * config.vision.merge;
  graph.sequence.default_resolution = config.image.height;
  graph.sequence.max_seq = config.text.max_position;
  graph.sequence.default_seq = std::min<int64_t>(config.text.max_position, image_tokens + 512);
  graph.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

}  // namespace headroom::models
