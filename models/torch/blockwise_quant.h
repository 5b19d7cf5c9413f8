// bitsandbytes' 8-bit block-wise quantization with LibTorch ops, its
// device-independent kernels (bitsandbytes/backends/default/ops.py
// quantize_blockwise, _dequantize_blockwise_compute) and the dynamic map
// (functional.py create_dynamic_map): shared by QLoRA's NF4 storage
// (nf4.h, double quantization) and the 8-bit AdamW (executor/adamw8bit.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>

namespace headroom::models::torch_modules {

// create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8): 256
// sorted f32 values in [-1, 1] (signed) or [0, 1], bit for bit bitsandbytes'.
torch::Tensor dynamic_map(bool is_signed = true, const torch::Device& device = torch::kCPU);

// Each value divided by its block's absmax as bitsandbytes' default kernels do
// (full blocks times 1 / absmax, a partial last block divided by its own: two
// roundings that can differ in the last bit, so both are kept), clamped to
// [-1, 1]; with the f32 absmax per block.
std::pair<torch::Tensor, torch::Tensor> scale_blocks(const torch::Tensor& values, int64_t blocksize);
// Index of the nearest value of a sorted code book (bucketize against the midpoints), int32.
torch::Tensor nearest_code(const torch::Tensor& scaled, const torch::Tensor& code);
// values [n] times their block's absmax (a partial last block too), f32.
torch::Tensor scale_back(const torch::Tensor& values, const torch::Tensor& absmax, int64_t blocksize);

// (uint8 codes of the input's shape, f32 absmax per block).
std::pair<torch::Tensor, torch::Tensor> quantize_blockwise(const torch::Tensor& values, const torch::Tensor& code,
                                                           int64_t blocksize);
// f32 values of `codes` (any shape) scaled by their blocks' absmax.
torch::Tensor dequantize_blockwise(const torch::Tensor& codes, const torch::Tensor& absmax, const torch::Tensor& code,
                                   int64_t blocksize);

}  // namespace headroom::models::torch_modules
