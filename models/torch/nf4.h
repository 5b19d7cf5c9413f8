// QLoRA's frozen base weights: 4-bit NormalFloat (NF4) storage as bitsandbytes
// keeps and saves it (bitsandbytes/functional.py quantize_4bit, QuantState),
// quantized and dequantized with LibTorch ops, which run on every device. The
// algorithm is bitsandbytes' device-independent one
// (bitsandbytes/backends/default/ops.py): one absmax per 64 weights, each weight
// the nearest of the 16 NF4 values times its block's absmax, two per byte with
// the first in the high nibble. Double quantization (compress_statistics)
// stores the absmax less their mean as 8-bit codes of the dynamic map, one
// fp32 absmax per 256 of them. tests/models/nf4_reference_test.cc holds this to
// weights bitsandbytes 0.50.2 quantized (scripts/make_nf4_reference.py).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/torch/blockwise_quant.h"

namespace headroom::models::torch_modules {

inline constexpr int64_t kNf4Blocksize = 64;          // bnb quantize_4bit's default, QLoRA's
inline constexpr int64_t kNf4NestedBlocksize = 256;  // quantize_4bit's second level (compress_statistics)

// The 16 NF4 values, sorted (bitsandbytes get_4bit_type("nf4")), f32.
torch::Tensor nf4_code_book(const torch::Device& device = torch::kCPU);
// One NF4 weight with everything bitsandbytes keeps beside it on the device
// (QuantState: absmax, code, offset and state2's absmax and code), named as
// its state dict names them under "<weight>.".
struct Nf4Weight {
  torch::Tensor packed;            // uint8 [ceil(n / 2), 1]
  torch::Tensor absmax;            // f32 [blocks], or uint8 codes with double quantization
  torch::Tensor quant_map;         // f32 [16], the NF4 values
  torch::Tensor nested_absmax;     // f32 [ceil(blocks / 256)]       (double quantization)
  torch::Tensor nested_quant_map;  // f32 [256], the dynamic map      (double quantization)
  torch::Tensor offset;            // f32 scalar, mean of the absmax (double quantization)
  std::vector<int64_t> shape;      // of the weight
  torch::ScalarType dtype = torch::kBFloat16;  // dequantized to

  bool double_quant() const { return nested_absmax.defined(); }
  int64_t numel() const;
  // The tensors as bitsandbytes' state dict names them after "<weight>."
  // ("" for the packed data itself).
  std::vector<std::pair<std::string, torch::Tensor>> tensors() const;
};

// Quantizes `weight` (f32, f16 or bf16; any device) as
// bnb.functional.quantize_4bit(weight, blocksize=64, quant_type="nf4",
// compress_statistics=double_quant). The result dequantizes to weight's dtype.
Nf4Weight quantize_nf4(const torch::Tensor& weight, bool double_quant);
// The weight back in its dtype and shape (bnb.functional.dequantize_4bit):
// a new tensor of numel elements, nothing cached.
torch::Tensor dequantize_nf4(const Nf4Weight& weight);

// The JSON bitsandbytes stores as "<weight>.quant_state.bitsandbytes__nf4"
// (QuantState.as_dict(packed=True)): quant_type, blocksize, dtype, shape and,
// with double quantization, nested_blocksize, nested_offset and nested_dtype.
std::string nf4_quant_state_json(const Nf4Weight& weight);
// Reads that JSON into `weight` (shape, dtype, offset on `device`). Errors
// name `origin` and the field.
void read_nf4_quant_state(const std::string& json, const std::string& origin, Nf4Weight& weight,
                          const torch::Device& device);

// y = x W^T for an NF4 W, as bitsandbytes' MatMul4Bit: W is dequantized for
// the forward matmul and again for dX in backward; nothing of x is saved
// (the base is frozen, so there is no dW), and no 16-bit copy of W outlives
// either matmul.
torch::Tensor nf4_linear(const torch::Tensor& x, const Nf4Weight& weight);

}  // namespace headroom::models::torch_modules
