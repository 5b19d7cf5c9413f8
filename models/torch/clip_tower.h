// CLIP's encoder layer and vision tower (transformers' modeling_clip.py,
// CLIPEncoderLayer and CLIPVisionModel's transformer), shared by the LLaVA
// module (its "vision_tower.vision_model") and CLIPModel ("vision_model";
// models/torch/clip_module.h). Parameters are named as transformers names
// them; each layer is a block the executor can checkpoint or offload.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "models/torch/layers.h"
#include "models/vision.h"

namespace headroom::models::torch_modules {

// CLIPVisionConfig's and CLIPTextConfig's layer_norm_eps default.
inline constexpr double kClipLayerNormEps = 1e-5;

// CLIPEncoderLayer with SDPA attention and quick_gelu as Python ops; `causal`
// for the text encoder (CLIPTextModel passes is_causal=True).
class ClipLayerImpl : public torch::nn::Module {
 public:
  explicit ClipLayerImpl(const VisionSpec& spec, double eps = kClipLayerNormEps, bool causal = false);
  torch::Tensor forward(const torch::Tensor& hidden);
  VisionSpec spec;
  bool causal;
  LayerNorm layer_norm1{nullptr}, layer_norm2{nullptr};
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(ClipLayer);

// CLIPVisionTransformer: embeddings (a bias-free patch convolution, the class
// embedding, a position table), pre_layrnorm and the encoder layers that run
// (spec.layers_to_run); register_tail() adds the layers past those and
// post_layernorm, so that a caller can add adapters before them (LLaVA runs
// neither, and PEFT's adapters there would train nothing).
class ClipVisionTowerImpl : public torch::nn::Module {
 public:
  explicit ClipVisionTowerImpl(const VisionSpec& spec, double eps = kClipLayerNormEps);
  void register_tail();
  // The last run layer's output [B, positions, hidden] for pixel_values
  // [B, 3, H, W]: the embeddings as the block "vision_embeddings", each layer
  // as "<spec.prefix>.encoder.layers.N".
  torch::Tensor encode(const torch::Tensor& pixel_values, const BlockRunner& runner);
  VisionSpec spec;
  double eps;
  torch::Tensor patch_weight, class_embedding, position_embedding;
  LayerNorm pre_layrnorm{nullptr}, post_layernorm{nullptr};
  std::vector<ClipLayer> layers;  // those that run

 private:
  torch::Tensor embed(const torch::Tensor& pixel_values);
  std::shared_ptr<torch::nn::Module> embeddings_;
  std::shared_ptr<torch::nn::Module> layer_list_;
};
TORCH_MODULE(ClipVisionTower);

}  // namespace headroom::models::torch_modules
