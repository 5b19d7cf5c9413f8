// ViTForImageClassification (transformers' modeling_vit.py) as a LibTorch
// module built from the planner's VisionSpec (style kVit), named like its
// parameters so a Hugging Face checkpoint loads and the planner's graph names
// every parameter: patch convolution, class token and positions, pre-norm
// layers (LayerNorm, SDPA over query/key/value with biases, exact GELU MLP),
// the final layernorm and a classifier over the class token. Each encoder
// layer is a block the executor can checkpoint or offload.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "models/torch/layers.h"
#include "models/vision.h"

namespace headroom::models::torch_modules {

class VitLayerImpl : public torch::nn::Module {
 public:
  VitLayerImpl(const VisionSpec& spec);
  torch::Tensor forward(const torch::Tensor& hidden);
  VisionSpec spec;
  torch::nn::LayerNorm layernorm_before{nullptr}, layernorm_after{nullptr};
  Linear query{nullptr}, key{nullptr}, value{nullptr}, attention_output{nullptr}, intermediate{nullptr}, output{nullptr};
};
TORCH_MODULE(VitLayer);

class VitForImageClassificationImpl : public torch::nn::Module {
 public:
  VitForImageClassificationImpl(const VisionSpec& spec, int64_t classes, const LoraOptions& lora = {});
  // Mean cross-entropy of pixel_values [B, 3, H, W] against labels [B].
  torch::Tensor loss(const torch::Tensor& pixel_values, const torch::Tensor& labels, const BlockRunner& runner);
  VisionSpec spec;
  int64_t classes;
  torch::Tensor patch_weight, patch_bias, cls_token, position_embeddings;
  std::vector<VitLayer> layers;
  torch::nn::LayerNorm layernorm{nullptr};
  Linear classifier{nullptr};
};
TORCH_MODULE(VitForImageClassification);

// PEFT's usual ViT targets: the attention projections and the dense layers.
LoraOptions vit_lora(int64_t rank, double alpha = 16);

}  // namespace headroom::models::torch_modules
