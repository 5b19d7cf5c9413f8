// Standalone vision transformers: ViT-B/16 (HF ViTForImageClassification), EVA
// ViT-g/14 as BLIP-2's vision encoder (HF Blip2VisionModel), and the CLIP
// ViT-L/14-336 vision tower (HF CLIPVisionModel, used by LLaVA; test-only here).
//
// The sequence axis S is the token count (patches + class token). Patch-level
// tensors (pixels, conv output) are sized B*S, one token more than the B*(S-1)
// patches, because SizeExpr coefficients must be non-negative (<0.6% at 197).
#include <string>

#include "models/layers.h"
#include "models/vision.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// ViTForImageClassification (sequence_output[:, 0, :]), and timm's
// VisionTransformer with global_pool 'token' (forward_head: x[:, 0], then
// `head`): the class token is a view of the final norm's output, so the
// classifier, keeping its input for its weight gradient, keeps that whole
// [B, S, hidden] tensor alive, not one token (the executor measured it:
// tiny ViT fully fine-tuned, activations -2.8% with a one-token copy).
// Dinov2ForImageClassification: the class token beside the mean of the patch
// tokens, [B, 2 x hidden], a new tensor. The mean's backward needs no saved
// tensor; the concatenation keeps nothing either.
void add_classification_head(GraphBuilder& b, const VisionSpec& s, const std::string& hidden, int64_t classes) {
  const std::string labels = b.input("labels", SizeExpr::per_sample(1), DType::kInt64, false);
  const SizeExpr token = SizeExpr::per_sample(s.hidden);
  if (s.style == VisionStyle::kTimm) {
    add_classifier_loss(b, "head", labels, hidden, s.hidden, classes);
    return;
  }
  if (s.style != VisionStyle::kDinov2) {
    add_classifier_loss(b, "classifier", labels, hidden, s.hidden, classes);
    return;
  }
  const std::string cls = b.copy(s.prefix + ".select_cls", "select_token", {hidden}, token);
  const std::string mean = b.copy(s.prefix + ".mean_patches", "mean_tokens", {hidden}, token);
  const std::string both = b.copy(s.prefix + ".cat_cls_mean", "concat", {cls, mean}, SizeExpr::per_sample(2 * s.hidden));
  add_classifier_loss(b, "classifier", labels, both, 2 * s.hidden, classes);
}

}  // namespace

graph::LayerGraph build_vit_b16(const ZooOptions& options) {
  // google/vit-base-patch16-224 config.json: hidden_size 768, num_hidden_layers
  // 12, num_attention_heads 12, intermediate_size 3072, patch_size 16,
  // image_size 224 (197 tokens), hidden_dropout_prob 0.0,
  // attention_probs_dropout_prob 0.0, 1000 labels, hidden_act gelu.
  VisionSpec s;
  s.style = VisionStyle::kVit;
  s.prefix = "vit";
  s.hidden = 768;
  s.layers = 12;
  s.layers_to_run = 12;
  s.heads = 12;
  s.mlp = 3072;
  s.patch = 16;
  s.positions = 197;
  s.rows = tokens();
  s.patch_rows = tokens();
  s.scores_per_head = square_tokens();
  return build_vit_from(s, 1000, options);
}

graph::LayerGraph build_vit_from(const VisionSpec& s, int64_t classes, const ZooOptions& options) {
  GraphBuilder b;
  b.set_param_dtype(DType::kF32);  // published float32
  std::string hidden = add_vision_encoder(b, s, options);
  b.begin_block("head", "classifier", false);
  hidden = add_vision_post_norm(b, s, hidden);
  add_classification_head(b, s, hidden, classes);
  return b.finish();
}

VisionSpec eva_vit_g_spec() {
  // Salesforce/blip2-opt-2.7b config.json vision_config (Blip2VisionConfig):
  // hidden_size 1408, intermediate_size 6144, num_hidden_layers 39,
  // num_attention_heads 16, patch_size 14, image_size 224 (257 tokens),
  // qkv_bias true, attention_dropout 0.0. LAVIS create_eva_vit_g: depth 39
  // (EVA-CLIP ViT-g has 40; BLIP-2 drops the last), mlp_ratio 4.3637 -> 6144.
  VisionSpec s;
  s.style = VisionStyle::kBlip2;
  s.prefix = "vision_model";
  s.hidden = 1408;
  s.layers = 39;
  s.layers_to_run = 39;
  s.heads = 16;
  s.mlp = 6144;
  s.patch = 14;
  s.positions = 257;
  s.rows = tokens();
  s.patch_rows = tokens();
  s.scores_per_head = square_tokens();
  s.post_layernorm = true;
  return s;
}

VisionSpec tiny_eva_vit_spec() {
  // EVA ViT-g's structure at toy size for CPU runs: hidden 64, 3 layers, 4
  // heads, MLP 256, patch 8 at 32 px (16 patches + the class token).
  VisionSpec s = eva_vit_g_spec();
  s.hidden = 64;
  s.layers = 3;
  s.layers_to_run = 3;
  s.heads = 4;
  s.mlp = 256;
  s.patch = 8;
  s.positions = 17;
  return s;
}

graph::LayerGraph build_eva_vit_from(const VisionSpec& s, const ZooOptions& options) {
  GraphBuilder b;
  b.set_param_dtype(DType::kF32);  // the BLIP-2 checkpoints are float32
  std::string hidden = add_vision_encoder(b, s, options);
  b.begin_block("head", "feature_loss", false);
  hidden = add_vision_post_norm(b, s, hidden);
  // No task head: a feature-matching loss stands in for whatever consumes the
  // features (BLIP-2's Q-Former); it keeps nothing large. The seed story's
  // loss is outputs.mean(), whose backward keeps nothing at all.
  OpSpec loss{"loss", "loss", {hidden}, SizeExpr::constant(1), DType::kF32, {}, {},
              times(tokens(), 2 * s.hidden), times(tokens(), s.hidden), {}, {}};
  b.op(loss);
  return b.finish();
}

graph::LayerGraph build_eva_vit_g(const ZooOptions& options) { return build_eva_vit_from(eva_vit_g_spec(), options); }

graph::LayerGraph build_clip_vit_l14_336_vision(const ZooOptions& options) {
  VisionSpec s = clip_vit_l14_336("vision_model", tokens(), tokens(), square_tokens());
  GraphBuilder b;
  b.set_param_dtype(DType::kF32);
  std::string hidden = add_vision_encoder(b, s, options);
  b.begin_block("head", "feature_loss", false);
  hidden = add_vision_post_norm(b, s, hidden);
  OpSpec loss{"loss", "loss", {hidden}, SizeExpr::constant(1), DType::kF32, {}, {},
              times(tokens(), 2 * s.hidden), times(tokens(), s.hidden), {}, {}};
  b.op(loss);
  graph::LayerGraph g = b.finish();
  g.name = "clip-vit-l-14-336-vision";
  g.family = "vit";
  g.source = "https://huggingface.co/openai/clip-vit-large-patch14-336/blob/main/config.json";
  g.sequence.unit = "image";
  g.sequence.patch_px = 14;
  g.sequence.extra_tokens = 1;
  g.sequence.default_resolution = 336;
  g.sequence.default_seq = 577;
  g.sequence.max_seq = 577;
  return g;
}

}  // namespace headroom::models
