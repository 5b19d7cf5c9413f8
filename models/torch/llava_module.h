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

#include "models/torch/layers.h"
#include "models/torch/llama_module.h"
#include "models/zoo_builders.h"

namespace headroom::models::torch_modules {

// CLIPEncoderLayer with SDPA attention and quick_gelu.
class ClipLayerImpl : public torch::nn::Module {
 public:
  explicit ClipLayerImpl(const VisionSpec& spec);
  torch::Tensor forward(const torch::Tensor& hidden);
  VisionSpec spec;
  torch::nn::LayerNorm layer_norm1{nullptr}, layer_norm2{nullptr};
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(ClipLayer);

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
  torch::Tensor patch_weight, class_embedding, position_embedding;
  torch::nn::LayerNorm pre_layrnorm{nullptr}, post_layernorm{nullptr};
  std::vector<ClipLayer> vision_layers;
  Linear linear_1{nullptr}, linear_2{nullptr};
  torch::nn::Embedding embed_tokens{nullptr};
  std::vector<DecoderLayer> layers;
  RMSNorm norm{nullptr};
  Linear lm_head{nullptr};
};
TORCH_MODULE(LlavaForConditionalGeneration);

}  // namespace headroom::models::torch_modules
