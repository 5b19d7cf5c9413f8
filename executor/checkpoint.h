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
#include <set>
#include <string>
#include <vector>

#include "models/torch/layers.h"

namespace headroom::executor {

using BlockFunction = models::torch_modules::BlockFn;

// Calls `block(inputs)`; keeps `inputs` only; `parameters` are the tensors the
// block trains (those with requires_grad are differentiated). With nothing to
// differentiate it simply runs the block without autograd.
std::vector<torch::Tensor> checkpoint(const BlockFunction& block, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& parameters);

// A BlockRunner (models/torch/layers.h) that checkpoints the blocks named in
// `blocks` (the graph's block names, as a Plan lists them) with the block
// module's trainable parameters, and runs every other block plainly.
models::torch_modules::BlockRunner checkpoint_runner(std::set<std::string> blocks);

}  // namespace headroom::executor
