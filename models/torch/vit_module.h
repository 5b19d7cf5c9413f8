// ViTForImageClassification (transformers' modeling_vit.py) as a LibTorch
// module built from the planner's VisionSpec (style kVit), named like its
// parameters so a Hugging Face checkpoint loads and the planner's graph names
// every parameter: patch convolution, class token and positions, pre-norm
// layers (LayerNorm, SDPA over query/key/value with biases, exact GELU MLP),
// the final layernorm and a classifier over the class token. Every graph block
// runs through the BlockRunner: "vision_embeddings", each encoder layer (which
// the executor can checkpoint or offload), "head".
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "models/torch/layers.h"
#include "models/vision.h"

namespace headroom::models::torch_modules {

class VitLayerImpl : public torch::nn::Module {
 public:
  VitLayerImpl(const VisionSpec& spec);
  torch::Tensor forward(const torch::Tensor& hidden);
  VisionSpec spec;
  LayerNorm layernorm_before{nullptr}, layernorm_after{nullptr};
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
  std::shared_ptr<torch::nn::Module> embeddings;  // owns the embeddings' parameters (a block of its own)
  torch::Tensor patch_weight, patch_bias, cls_token, position_embeddings;
  std::vector<VitLayer> layers;
  LayerNorm layernorm{nullptr};
  Linear classifier{nullptr};
};
TORCH_MODULE(VitForImageClassification);

// PEFT's usual ViT targets: the attention projections and the dense layers.
LoraOptions vit_lora(int64_t rank, double alpha = 16);

// One layer of EVA ViT-g as BLIP-2's vision encoder, named as transformers'
// Blip2EncoderLayer (modeling_blip_2.py): layer_norm1, self_attn (one fused
// bias-free qkv linear, projection), layer_norm2, mlp.fc1 / mlp.fc2 with exact
// GELU. The qkv bias is LAVIS's (lavis/models/eva_vit.py Attention): the
// parameters self_attn.q_bias and self_attn.v_bias, concatenated with zeros
// for k on every forward, as the planner's graph names them.
class Blip2VisionLayerImpl : public torch::nn::Module {
 public:
  Blip2VisionLayerImpl(const VisionSpec& spec);
  torch::Tensor forward(const torch::Tensor& hidden);
  VisionSpec spec;
  LayerNorm layer_norm1{nullptr}, layer_norm2{nullptr};
  Linear qkv{nullptr}, projection{nullptr}, fc1{nullptr}, fc2{nullptr};
  torch::Tensor q_bias, v_bias;
};
TORCH_MODULE(Blip2VisionLayer);

// EVA ViT-g (the planner's eva-vit-g, tiny-eva-vit; VisionStyle::kBlip2) as
// transformers' Blip2VisionModel under the prefix "vision_model": patch
// convolution with bias, class embedding and position embedding parameters,
// the layers, the post LayerNorm; the loss is the mean of its output over every
// token and channel, the seed story's `outputs.mean()`. Every graph block runs
// through the BlockRunner: "vision_embeddings", each layer, "head".
class Blip2VisionModelImpl : public torch::nn::Module {
 public:
  Blip2VisionModelImpl(const VisionSpec& spec, const LoraOptions& lora = {});
  // Mean of the post LayerNorm's output for pixel_values [B, 3, H, W].
  torch::Tensor loss(const torch::Tensor& pixel_values, const BlockRunner& runner);
  VisionSpec spec;
  std::shared_ptr<torch::nn::Module> embeddings;  // owns the embeddings' parameters (a block of its own)
  torch::Tensor patch_weight, patch_bias, class_embedding, position_embedding;
  std::vector<Blip2VisionLayer> layers;
  LayerNorm post_layernorm{nullptr};
};
TORCH_MODULE(Blip2VisionModel);

// The zoo's EVA ViT targets (models/zoo.cc): qkv, projection, fc1, fc2.
LoraOptions eva_vit_lora(int64_t rank, double alpha = 16);

}  // namespace headroom::models::torch_modules
