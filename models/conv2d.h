// nn.Conv2d as the zoo's convolutional models build it (torchvision's ResNet, diffusers'
// UNet2DConditionModel).
#pragma once

#include <cstdint>
#include <string>

#include "models/graph_builder.h"

namespace headroom::models {

// Conv2d `name` from `in` to `out` channels, a `kernel` x `kernel` square, with a bias or
// not, writing `out_elements`: it saves its input; 2 * in * k^2 FLOPs per output element,
// and dX and dW cost the same again each. Returns the output tensor.
std::string conv2d(GraphBuilder& b, const std::string& name, const std::string& x, int64_t in, int64_t out,
                   int64_t kernel, const SizeExpr& out_elements, bool bias);

}  // namespace headroom::models
