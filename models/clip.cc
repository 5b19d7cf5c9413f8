// CLIP and SigLIP (HF CLIPModel, SiglipModel) for contrastive fine-tuning:
// both towers and the image-text loss; or the vision tower alone
// (CLIPVisionModel, SiglipVisionModel). The text encoder layers have the
// vision layers' names and shapes (models/vision.h add_vision_layer).
#include <string>

#include "models/layers.h"
#include "models/vision.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

const SizeExpr kOne = SizeExpr::per_sample(1);

bool is_siglip(const ClipConfig& c) { return c.vision.style == VisionStyle::kSiglip; }

// SiglipMultiheadAttentionPoolingHead: a learned probe attends over all image
// tokens (nn.MultiheadAttention: in_proj, out_proj), then LayerNorm and an MLP
// with a residual. One op for the attention: it keeps its input and the
// per-sample k, v projections.
std::string siglip_pooling_head(GraphBuilder& b, const VisionSpec& s, const std::string& hidden) {
  const std::string h = s.prefix + ".head";
  const SizeExpr kv_elements = times(s.rows, 2 * s.hidden);
  OpSpec attn{h + ".attention",
              "attention_pool",
              {hidden},
              times(kOne, s.hidden),
              std::nullopt,
              {SavedRef{hidden, SaveWhen::kAnyGrad}},
              {},
              times(s.rows, 4 * s.hidden * s.hidden),
              times(s.rows, 4 * s.hidden * s.hidden),
              times(s.rows, 4 * s.hidden * s.hidden),
              kv_elements};
  attn.params = {b.param(h + ".probe", {1, 1, s.hidden}),
                 b.param(h + ".attention.in_proj_weight", {3 * s.hidden, s.hidden}),
                 b.param(h + ".attention.in_proj_bias", {3 * s.hidden}),
                 b.param(h + ".attention.out_proj.weight", {s.hidden, s.hidden}),
                 b.param(h + ".attention.out_proj.bias", {s.hidden})};
  const std::string pooled = b.op(attn);
  const std::string x =
      b.norm(h + ".layernorm", pooled, kOne, s.hidden, NormKind::kLayerNorm, true, true);
  const std::string up = b.linear(h + ".mlp.fc1", x, kOne, s.hidden, s.mlp, true);
  const std::string act =
      b.activation(h + ".mlp.activation_fn", up, times(kOne, s.mlp), "gelu_tanh");
  const std::string down = b.linear(h + ".mlp.fc2", act, kOne, s.mlp, s.hidden, true);
  return b.add(h + ".residual", pooled, down, times(kOne, s.hidden));
}

// The vision tower and its pooled [B, hidden] output: CLIP's post_layernorm of
// the class token; SigLIP's post_layernorm over all tokens and the pooling head.
std::string vision_tower(GraphBuilder& b, const ClipConfig& c, const ZooOptions& options) {
  const VisionSpec& s = c.vision;
  std::string hidden = add_vision_encoder(b, s, options);
  b.begin_block("vision_head", "vision_pool", false);
  if (is_siglip(c)) {
    hidden = add_vision_post_norm(b, s, hidden);
    return c.vision_head ? siglip_pooling_head(b, s, hidden) : hidden;
  }
  // CLIPVisionModel: post_layernorm(last_hidden_state[:, 0, :]); the class
  // token is a view of the last layer's output, which the norm, keeping its
  // input for backward, keeps whole (measured by the executor on
  // tests/data/hf/tiny-clip fully fine-tuned: activations -2.0% with a
  // one-token copy).
  return b.norm(s.prefix + ".post_layernorm", hidden, kOne, s.hidden, NormKind::kLayerNorm, true,
                true);
}

// CLIPTextTransformer / SiglipTextTransformer: token and position embeddings,
// encoder layers over text_tokens, final_layer_norm, the pooled token (CLIP:
// the EOS token; SigLIP: the last) and SigLIP's head linear.
std::string text_tower(GraphBuilder& b, const ClipConfig& c, const ZooOptions& options) {
  VisionSpec t = c.vision;
  t.prefix = "text_model";
  t.hidden = c.text_hidden;
  t.layers = t.layers_to_run = c.text_layers;
  t.heads = c.text_heads;
  t.mlp = c.text_mlp;
  t.positions = c.text_tokens;
  t.rows = fixed_tokens(c.text_tokens);
  t.scores_per_head = fixed_square(c.text_tokens);
  const SizeExpr h_elements = times(t.rows, t.hidden);
  b.begin_block("text_embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", t.rows, DType::kInt64, false);
  const std::string pos_ids =
      b.input("text_position_ids", SizeExpr::constant(c.text_tokens), DType::kInt64, false);
  const std::string tok =
      b.embedding("text_model.embeddings.token_embedding", ids, t.rows, c.text_vocab, t.hidden);
  const std::string pos = b.embedding("text_model.embeddings.position_embedding", pos_ids,
                                      SizeExpr::constant(c.text_tokens), c.text_tokens, t.hidden);
  std::string hidden = b.add("text_model.embeddings.sum", tok, pos, h_elements);
  for (int64_t i = 0; i < t.layers; ++i) hidden = add_vision_layer(b, t, i, hidden, options);
  b.begin_block("text_head", "text_pool", false);
  hidden = b.norm("text_model.final_layer_norm", hidden, t.rows, t.hidden, NormKind::kLayerNorm,
                  true, true);
  const std::string pooled =
      b.copy("text_model.select_pooled", "select_token", {hidden}, times(kOne, t.hidden));
  if (!is_siglip(c)) return pooled;
  return b.linear("text_model.head", pooled, kOne, t.hidden, t.hidden, true);
}

}  // namespace

graph::LayerGraph build_clip_from(const ClipConfig& c, const ZooOptions& options) {
  GraphBuilder b;
  b.set_param_dtype(DType::kF32);  // openai/clip-* and google/siglip-* publish float32
  const std::string image = vision_tower(b, c, options);
  if (c.text_layers == 0) {
    // The vision tower alone: a feature loss stands in for whatever consumes it.
    OpSpec loss{"loss",
                "loss",
                {image},
                SizeExpr::constant(1),
                DType::kF32,
                {},
                {},
                times(kOne, 2 * c.vision.hidden),
                times(kOne, c.vision.hidden),
                {},
                {}};
    b.op(loss);
    return b.finish();
  }
  const std::string text = text_tower(b, c, options);
  b.begin_block("head", "contrastive_loss", false);
  std::string image_embeds = image;
  std::string text_embeds = text;
  int64_t width = c.text_hidden;
  if (!is_siglip(c)) {
    image_embeds =
        b.linear("visual_projection", image, kOne, c.vision.hidden, c.projection_dim, false);
    text_embeds = b.linear("text_projection", text, kOne, c.text_hidden, c.projection_dim, false);
    width = c.projection_dim;
  }
  // Normalised embeddings and the [B, B] logits: per sample they are small
  // (B <= a few thousand); counted as B x width each.
  OpSpec loss{
      "loss",
      "contrastive_loss",
      {image_embeds, text_embeds},
      SizeExpr::constant(1),
      DType::kF32,
      {SavedRef{image_embeds, SaveWhen::kAnyGrad}, SavedRef{text_embeds, SaveWhen::kAnyGrad}},
      {},
      times(kOne, 8 * width),
      times(kOne, 8 * width),
      {},
      times(kOne, 2 * width)};
  loss.params = {
      b.param("logit_scale", is_siglip(c) ? std::vector<int64_t>{1} : std::vector<int64_t>{})};
  if (is_siglip(c)) loss.params.push_back(b.param("logit_bias", {1}));
  b.op(loss);
  return b.finish();
}

}  // namespace headroom::models
