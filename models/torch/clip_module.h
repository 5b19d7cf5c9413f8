// CLIPModel (transformers' modeling_clip.py) for contrastive fine-tuning, as a
// LibTorch module built from the planner's reading of the config
// (models::read_hf_clip), named like its parameters: the vision tower
// ("vision_model", models/torch/clip_tower.h) pooled by post_layernorm over the
// class token, the text tower ("text_model": token and position embeddings,
// causal CLIP layers, final_layer_norm, pooled at the EOS token), the two
// bias-free projections and logit_scale, and the symmetric image-text
// cross-entropy. Every graph block runs through the BlockRunner:
// "vision_embeddings", the vision layers, "vision_head", "text_embeddings", the
// text layers, "text_head" and "head".
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "models/hf_fields.h"
#include "models/torch/clip_tower.h"
#include "models/torch/layers.h"

namespace headroom::models::torch_modules {

// CLIPTextModel's transformer: embeddings, causal encoder layers, final_layer_norm.
class ClipTextTowerImpl : public torch::nn::Module {
 public:
  explicit ClipTextTowerImpl(const HfClip& clip);
  // The final_layer_norm output [B, S, hidden] of input_ids [B, S].
  torch::Tensor encode(const torch::Tensor& input_ids, const BlockRunner& runner);
  VisionSpec spec;  // the text layers' shapes, prefix "text_model"
  torch::Tensor token_embedding, position_embedding;
  std::vector<ClipLayer> layers;
  LayerNorm final_layer_norm{nullptr};

 private:
  std::shared_ptr<torch::nn::Module> embeddings_;
};
TORCH_MODULE(ClipTextTower);

class ClipModelImpl : public torch::nn::Module {
 public:
  explicit ClipModelImpl(const HfClip& clip, const LoraOptions& lora = {});
  // The contrastive loss of pixel_values [B, 3, H, W] against input_ids [B, S]
  // (pair i matches image i with text i), each text ending at its EOS token.
  torch::Tensor loss(const torch::Tensor& pixel_values, const torch::Tensor& input_ids, const BlockRunner& runner);
  HfClip clip;
  ClipVisionTower vision_model{nullptr};
  ClipTextTower text_model{nullptr};
  Linear visual_projection{nullptr}, text_projection{nullptr};
  torch::Tensor logit_scale;

 private:
  std::shared_ptr<torch::nn::Module> vision_head_, text_head_, head_;  // the runner's handles on those blocks
};
TORCH_MODULE(ClipModel);

// PEFT's usual CLIP targets (the planner's graph.lora_targets).
LoraOptions clip_lora(int64_t rank, double alpha = 16);

}  // namespace headroom::models::torch_modules
