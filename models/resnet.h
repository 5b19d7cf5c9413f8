// ResNet with BatchNorm (He et al. 2015), as torchvision builds it
// (torchvision/models/resnet.py: ResNet, Bottleneck v1.5 with the stride on
// the 3x3 conv, BasicBlock) or as transformers does (ResNetForImageClassification:
// the same network under other parameter names).
//
// The sequence axis S is the final feature map: S = (resolution / 32)^2 (49 at
// 224 px). Every feature map is a fixed multiple of it: 256 S after the stem
// conv, 64 S after the max pool, then 64, 16, 4 and 1 S per stage.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "graph/layer_graph.h"
#include "models/zoo.h"

namespace headroom::models {

// The op of torchvision's last batch norm of a residual block with `out += identity`
// and the in-place relu fused into its node (one storage; models/resnet.cc).
inline constexpr std::string_view kBatchNormAddReluOp = "batch_norm_add_relu";

enum class ResNetNames {
  kTorchvision,  // conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc
  kHuggingFace,  // resnet.embedder.embedder.convolution, resnet.encoder.stages.0.layers.0.layer.0..., classifier.1
};

struct ResNetConfig {
  ResNetNames names = ResNetNames::kTorchvision;
  int64_t stem_width = 64;  // torchvision: the first inplanes; HF: embedding_size
  // Output channels of each stage (torchvision: planes * expansion; HF: hidden_sizes).
  std::vector<int64_t> widths = {256, 512, 1024, 2048};
  std::vector<int64_t> depths = {3, 4, 6, 3};  // residual blocks per stage
  bool bottleneck = true;      // Bottleneck (1x1, 3x3, 1x1; inner width = out / 4) or BasicBlock (3x3, 3x3)
  bool stride_in_1x1 = false;  // ResNet v1: the stride on the first 1x1 (HF downsample_in_bottleneck)
  int64_t classes = 1000;
};

// torchvision resnet50(): 25,557,032 parameters.
inline const ResNetConfig kResNet50{};
// torchvision's ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10) with the stem
// at 8 channels (inplanes 8: planes 8, 16, 32, 64), for CPU runs at 32 px: 130,962
// parameters.
inline const ResNetConfig kTinyResNet{ResNetNames::kTorchvision, 8, {32, 64, 128, 256}, {1, 1, 1, 1}, true, false, 10};

// The stem and the head are blocks of their own that are not checkpointed (as
// the vision transformers' embeddings and heads); each residual block is one
// checkpointable block named as its module ("layer1.0" or
// "resnet.encoder.stages.0.layers.0"). BatchNorm's running statistics and
// num_batches_tracked are buffers (graph::Param::buffer): stored, never trained.
graph::LayerGraph build_resnet(const ResNetConfig& config, const ZooOptions& options);

}  // namespace headroom::models
