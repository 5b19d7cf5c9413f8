// Activation checkpointing for LibTorch (which has no torch.utils.checkpoint):
// runs a block without keeping its intermediates and recomputes it during
// backward. The block's trainable parameters are explicit inputs of the
// autograd node, so its output requires grad whenever anything inside trains,
// even when the block's input does not (frozen embeddings with adapters inside,
// the first block). The "element 0 of tensors does not require grad" failure of
// reentrant checkpointing therefore cannot happen.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace headroom::executor {

using BlockFunction = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// Calls `block(inputs)`; keeps `inputs` only; `parameters` are the tensors the
// block trains (those with requires_grad are differentiated). With nothing to
// differentiate it simply runs the block without autograd.
std::vector<torch::Tensor> checkpoint(const BlockFunction& block, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& parameters);

}  // namespace headroom::executor
