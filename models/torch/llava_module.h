// LlavaForConditionalGeneration (transformers' modeling_llava.py, with the
// parameter names of its checkpoints, "vision_tower.vision_model...",
// "multi_modal_projector...", "language_model.model..." and
// "language_model.lm_head") as a LibTorch module built from the planner's
// LlavaConfig: a CLIP vision tower run to the feature layer, the class token
// dropped (vision_feature_select_strategy "default"), a two-layer projector,
// and the Llama decoder with the projected image features scattered into the
// placeholder tokens' embeddings. Each CLIP and decoder layer is a block the
// executor can checkpoint or offload.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "models/torch/clip_tower.h"
#include "models/torch/layers.h"
#include "models/torch/llama_module.h"
#include "models/zoo_builders.h"

namespace headroom::models::torch_modules {

class LlavaForConditionalGenerationImpl : public torch::nn::Module {
 public:
  LlavaForConditionalGenerationImpl(const LlavaConfig& config, int64_t image_token, const LoraOptions& lora = {});
  // Mean next-token loss over the text positions of input_ids [B, S] (the
  // first image_tokens positions are image placeholders) with pixel_values
  // [B, 3, H, W]; also returns the logits.
  std::pair<torch::Tensor, torch::Tensor> loss_and_logits(const torch::Tensor& pixel_values,
                                                          const torch::Tensor& input_ids, const BlockRunner& runner);
  LlavaConfig config;
  int64_t image_token;
  ClipVisionTower vision{nullptr};  // "vision_tower.vision_model" (models/torch/clip_tower.h)
  Linear linear_1{nullptr}, linear_2{nullptr};
  torch::nn::Embedding embed_tokens{nullptr};
  std::vector<DecoderLayer> layers;
  RMSNorm norm{nullptr};
  Linear lm_head{nullptr};
};
TORCH_MODULE(LlavaForConditionalGeneration);

}  // namespace headroom::models::torch_modules
