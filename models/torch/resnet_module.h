// torchvision's ResNet (torchvision/models/resnet.py: Bottleneck v1.5 with the
// stride on the 3x3 conv, or BasicBlock) as a LibTorch module built from the
// planner's ResNetConfig (torchvision names only), named as torchvision names
// its parameters and buffers. BatchNorm trains in training mode (batch
// statistics, running statistics updated each forward) and its ReLUs and the
// residual add are in place, as torchvision's, because that decides what
// autograd keeps. Each residual block is a block the executor can checkpoint
// or offload.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "models/resnet.h"
#include "models/torch/layers.h"

namespace headroom::models::torch_modules {

class ResidualBlockImpl : public torch::nn::Module {
 public:
  ResidualBlockImpl(int64_t in, int64_t out, int64_t stride, bool bottleneck);
  torch::Tensor forward(const torch::Tensor& x);
  bool bottleneck;
  std::vector<torch::nn::Conv2d> convs;
  std::vector<torch::nn::BatchNorm2d> norms;
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(ResidualBlock);

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetConfig& config);
  // Mean cross-entropy of images [B, 3, H, W] against labels [B].
  torch::Tensor loss(const torch::Tensor& images, const torch::Tensor& labels, const BlockRunner& runner);
  // Module::to converts every buffer: num_batches_tracked goes back to int64.
  void restore_integer_buffers();
  ResNetConfig config;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  std::vector<std::pair<std::string, ResidualBlock>> blocks;  // ("layer1.0", block), ...
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

}  // namespace headroom::models::torch_modules
