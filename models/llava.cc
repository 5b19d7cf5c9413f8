// LLaVA-Llama-3-8B (HF LlavaForConditionalGeneration, as in
// xtuner/llava-llama-3-8b-v1_1-transformers): CLIP ViT-L/14-336 vision tower,
// features of the penultimate layer (vision_feature_layer -2) without the class
// token (576 per image), a 2-layer GELU projector 1024 -> 4096 -> 4096, and
// Llama-3-8B-Instruct. One image per sample; S counts all LM tokens including
// the 576 image tokens, which replace placeholder embeddings (masked_scatter).
#include <string>

#include "models/layers.h"
#include "models/llama.h"
#include "models/vision.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// CLIP ViT-L/14 at 336px: 24x24 = 576 patches + 1 class token.
constexpr int64_t kImageTokens = 576;
constexpr int64_t kVisionTokens = kImageTokens + 1;
constexpr int64_t kProjectorHidden = 4096;  // projector linear_1 out = text hidden_size

}  // namespace

graph::LayerGraph build_llava_llama3_8b(const ZooOptions& options) {
  LlavaConfig config;
  config.vision = clip_vit_l14_336("vision_tower.vision_model", fixed_tokens(kVisionTokens),
                                   fixed_tokens(kImageTokens), fixed_square(kVisionTokens));
  // HF runs all 24 layers (output_hidden_states) and uses hidden_states[-2]:
  // the last layer and post_layernorm run but nothing reads their output.
  config.vision.layers_to_run = config.vision.layers - 1;
  config.text = kLlama3_8b;
  config.image_tokens = kImageTokens;
  static_assert(kProjectorHidden == kLlama3_8b.hidden);
  return build_llava_from(config, options);
}

graph::LayerGraph build_llava_from(const LlavaConfig& config, const ZooOptions& options) {
  GraphBuilder b;
  b.set_param_dtype(DType::kBF16);
  const VisionSpec& vision = config.vision;
  const std::string features = add_vision_encoder(b, vision, options);

  const LlamaConfig& lm = config.text;
  const int64_t projector_hidden = lm.hidden;  // LlavaMultiModalProjector: linear_1 out = text hidden_size
  const SizeExpr image_rows = fixed_tokens(config.image_tokens);
  b.begin_block("multi_modal_projector", "projector", false);
  const std::string patches = b.copy("vision_feature_select", "slice", {features},
                                     times(image_rows, vision.hidden));
  const std::string p1 = b.linear("multi_modal_projector.linear_1", patches, image_rows,
                                  vision.hidden, projector_hidden, true);
  const std::string act = b.activation("multi_modal_projector.act", p1,
                                       times(image_rows, projector_hidden), config.projector_act);
  const std::string image_embeds = b.linear("multi_modal_projector.linear_2", act, image_rows,
                                            projector_hidden, lm.hidden, true);
  const std::string ids = b.input("input_ids", tokens(), DType::kInt64, false);
  const std::string text_embeds =
      b.embedding("language_model.model.embed_tokens", ids, tokens(), lm.vocab, lm.hidden);
  // masked_scatter: a new [B, S, hidden] tensor; its backward needs only the
  // (input-sized, boolean, non-batched-expanded) mask, counted as nothing.
  const std::string embeds = b.copy("merge_image_features", "masked_scatter",
                                    {text_embeds, image_embeds}, times(tokens(), lm.hidden));
  const int64_t head_dim = lm.head_dim > 0 ? lm.head_dim : lm.hidden / lm.heads;
  const auto [cos, sin] = add_rope_tables(b, "language_model.model", head_dim);
  const std::string hidden =
      add_llama_layers(b, lm, "language_model.model", embeds, cos, sin, options);
  add_causal_lm_head(b, "language_model.model.norm", "language_model.lm_head", hidden, lm.hidden,
                     lm.vocab, lm.rms_norm);
  graph::LayerGraph graph = b.finish();
  if (lm.tie_embeddings) {
    tie_parameter(graph, "language_model.lm_head.weight", "language_model.model.embed_tokens.weight");
  }
  return graph;
}

}  // namespace headroom::models
