#include "models/torch/blockwise_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace headroom::models::torch_modules {

// Ported op for op (the same fp32 torch ops on the same values) so that the
// map is bit-identical to bitsandbytes': linspace boundaries in fp32, their
// midpoints, scaled by the decade 10^(i - 6) as a Python float times an fp32
// tensor; then 0 and 1, sorted. max_exponent_bits 7 and total_bits 8 leave no
// "additional items" and no gap to fill.
torch::Tensor dynamic_map(bool is_signed, const torch::Device& device) {
  constexpr int kMaxExponentBits = 7;
  constexpr int kNonSignBits = 7;  // total_bits - 1
  std::vector<float> data;
  for (int i = 0; i < kMaxExponentBits; ++i) {
    const int64_t fraction_items = is_signed ? (int64_t{1} << (i + kNonSignBits - kMaxExponentBits)) + 1
                                             : (int64_t{1} << (i + kNonSignBits - kMaxExponentBits + 1)) + 1;
    const torch::Tensor boundaries = torch::linspace(0.1, 1, fraction_items, torch::kFloat);
    const int64_t n = boundaries.size(0);
    const torch::Tensor means = (boundaries.slice(0, 0, n - 1) + boundaries.slice(0, 1, n)) / 2.0;
    const double decade = std::pow(10.0, static_cast<double>(-(kMaxExponentBits - 1) + i));
    for (double sign : is_signed ? std::vector<double>{1.0, -1.0} : std::vector<double>{1.0}) {
      const torch::Tensor values = (means * (sign * decade)).contiguous();
      data.insert(data.end(), values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
    }
  }
  data.push_back(0.0F);
  data.push_back(1.0F);
  std::sort(data.begin(), data.end());
  return torch::tensor(data, torch::kFloat).to(device);
}

std::pair<torch::Tensor, torch::Tensor> scale_blocks(const torch::Tensor& values, int64_t blocksize) {
  const torch::Tensor flat = values.reshape(-1).to(torch::kFloat);
  const int64_t n = flat.numel();
  const int64_t rem = n % blocksize;
  const int64_t full = n - rem;
  const torch::Tensor blocks = flat.slice(0, 0, full).view({full / blocksize, blocksize});
  torch::Tensor absmax = std::get<0>(blocks.abs().max(-1));
  torch::Tensor scaled = torch::clamp(blocks * (1.0 / absmax.clamp_min(1e-38)).view({-1, 1}), -1, 1).reshape(-1);
  if (rem > 0) {
    const torch::Tensor tail = flat.slice(0, full);
    const torch::Tensor am = tail.abs().max().clamp_min(1e-38);
    absmax = torch::cat({absmax, am.unsqueeze(0)});
    scaled = torch::cat({scaled, torch::clamp(tail / am, -1, 1)});
  }
  return {scaled, absmax};
}

torch::Tensor nearest_code(const torch::Tensor& scaled, const torch::Tensor& code) {
  const torch::Tensor bounds = (code.slice(0, 0, -1) + code.slice(0, 1)) / 2;
  return torch::bucketize(scaled, bounds, /*out_int32=*/true);
}

torch::Tensor scale_back(const torch::Tensor& values, const torch::Tensor& absmax, int64_t blocksize) {
  const int64_t n = values.numel();
  const int64_t rem = n % blocksize;
  const int64_t full = n - rem;
  torch::Tensor out =
      (values.slice(0, 0, full).view({-1, blocksize}) * absmax.slice(0, 0, full / blocksize).view({-1, 1})).reshape(-1);
  if (rem > 0) out = torch::cat({out, values.slice(0, full) * absmax[full / blocksize]});
  return out;
}

std::pair<torch::Tensor, torch::Tensor> quantize_blockwise(const torch::Tensor& values, const torch::Tensor& code,
                                                           int64_t blocksize) {
  auto [scaled, absmax] = scale_blocks(values, blocksize);
  return {nearest_code(scaled, code.to(torch::kFloat)).to(torch::kUInt8).view(values.sizes()), absmax};
}

torch::Tensor dequantize_blockwise(const torch::Tensor& codes, const torch::Tensor& absmax, const torch::Tensor& code,
                                   int64_t blocksize) {
  const torch::Tensor values = code.index({codes.reshape(-1).to(torch::kLong)});
  return scale_back(values, absmax, blocksize).view(codes.sizes());
}

}  // namespace headroom::models::torch_modules
