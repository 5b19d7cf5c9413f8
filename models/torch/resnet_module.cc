#include "models/torch/resnet_module.h"

#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

}  // namespace

ResidualBlockImpl::ResidualBlockImpl(int64_t in, int64_t out, int64_t stride, bool is_bottleneck)
    : bottleneck(is_bottleneck) {
  // Bottleneck: 1x1 to out / 4, 3x3 with the stride (v1.5), 1x1 to out.
  // BasicBlock: 3x3 with the stride, 3x3.
  const int64_t inner = bottleneck ? out / 4 : out;
  const std::vector<std::vector<int64_t>> layers =
      bottleneck ? std::vector<std::vector<int64_t>>{{in, inner, 1, 1}, {inner, inner, 3, stride}, {inner, out, 1, 1}}
                 : std::vector<std::vector<int64_t>>{{in, out, 3, stride}, {out, out, 3, 1}};
  for (size_t k = 0; k < layers.size(); ++k) {
    const auto& l = layers[k];
    convs.push_back(register_module("conv" + std::to_string(k + 1), conv(l[0], l[1], l[2], l[3])));
    norms.push_back(register_module("bn" + std::to_string(k + 1), torch::nn::BatchNorm2d(l[1])));
  }
  if (stride != 1 || in != out) {
    downsample = register_module("downsample", torch::nn::Sequential(conv(in, out, 1, stride), torch::nn::BatchNorm2d(out)));
  }
}

torch::Tensor ResidualBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = x;
  for (size_t k = 0; k < convs.size(); ++k) {
    y = norms[k](convs[k](y));
    if (k + 1 < convs.size()) y = torch::relu_(y);  // nn.ReLU(inplace=True)
  }
  const torch::Tensor identity = downsample ? downsample->forward(x) : x;
  y += identity;  // out += identity, in place
  return torch::relu_(y);
}

ResNetImpl::ResNetImpl(const ResNetConfig& c) : config(c) {
  conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, c.stem_width, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(c.stem_width));
  int64_t in = c.stem_width;
  for (size_t stage = 0; stage < c.widths.size(); ++stage) {
    auto layer = register_module("layer" + std::to_string(stage + 1), std::make_shared<torch::nn::Module>());
    for (int64_t i = 0; i < c.depths[stage]; ++i) {
      const int64_t stride = stage > 0 && i == 0 ? 2 : 1;
      auto block = layer->register_module(std::to_string(i), ResidualBlock(in, c.widths[stage], stride, c.bottleneck));
      blocks.emplace_back("layer" + std::to_string(stage + 1) + "." + std::to_string(i), block);
      in = c.widths[stage];
    }
  }
  fc = register_module("fc", torch::nn::Linear(in, c.classes));
}

void ResNetImpl::restore_integer_buffers() {
  torch::NoGradGuard no_grad;
  for (auto& item : named_buffers()) {
    if (item.key().size() >= 19 && item.key().compare(item.key().size() - 19, 19, "num_batches_tracked") == 0) {
      item.value().set_data(item.value().to(torch::kLong));
    }
  }
}

torch::Tensor ResNetImpl::loss(const torch::Tensor& images, const torch::Tensor& labels, const BlockRunner& runner) {
  torch::Tensor x = bn1(conv1(images));
  torch::relu_(x);
  x = F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1));
  for (auto& [name, block] : blocks) {
    ResidualBlock b = block;
    const BlockFn fn = [b](const std::vector<torch::Tensor>& in) mutable {
      return std::vector<torch::Tensor>{b->forward(in[0])};
    };
    x = run_block(runner, name, *b, fn, {x})[0];
  }
  x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
  return F::cross_entropy(fc(x), labels);
}

}  // namespace headroom::models::torch_modules
