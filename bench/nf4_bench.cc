// QLoRA's NF4 linear (models/torch/nf4.h) against a plain 16-bit linear of the
// same shape, measured in the same run on the same device (the CPU here; the
// first CUDA device where LibTorch sees one):
//   dense      F::linear over the bf16 weight, forward and dX in backward (the
//              weight frozen, as a QLoRA base is);
//   nf4        the same through nf4_linear: dequantize, matmul; dequantize
//              again for dX (bitsandbytes' MatMul4Bit path for training rows);
//   dequantize dequantize_nf4 alone, with the bytes it moves (0.5 B read and
//              2 B written per weight, plus the absmax), as GB/s.
// Ratios are nf4 / dense. The planner prices the dequantization as a
// memory-bound kernel before each GEMM (docs/memory-model.md); on a GPU this
// bench is where bitsandbytes' own CUDA kernels would be compared, which this
// build does not link.
//
// Usage: nf4_bench [rows in out ...] (default: 512 2048 2048, 512 4096 4096,
// 2048 4096 11008 on CUDA; the first two on the CPU).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "models/torch/nf4.h"

namespace {

namespace tm = headroom::models::torch_modules;

constexpr int kWarmup = 2;
constexpr int kTimed = 7;

double median_ms(const std::function<void()>& work, const torch::Device& device) {
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  for (int i = 0; i < kWarmup; ++i) work();
  sync();
  std::vector<double> times;
  for (int i = 0; i < kTimed; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    sync();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void run_shape(int64_t rows, int64_t in, int64_t out, const torch::Device& device) {
  torch::manual_seed(0);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  const torch::Tensor weight = torch::randn({out, in}, bf16) * 0.02;
  const tm::Nf4Weight q = tm::quantize_nf4(weight, true);
  const torch::Tensor x = torch::randn({rows, in}, bf16).requires_grad_(true);
  const torch::Tensor grad = torch::randn({rows, out}, bf16);

  const double dense = median_ms(
      [&] {
        torch::Tensor y = torch::nn::functional::linear(x, weight);
        y.backward(grad);
      },
      device);
  const double nf4 = median_ms(
      [&] {
        torch::Tensor y = tm::nf4_linear(x, q);
        y.backward(grad);
      },
      device);
  const double dequant = median_ms([&] { (void)tm::dequantize_nf4(q); }, device);
  const double bytes = static_cast<double>(in * out) * (0.5 + 2.0) + static_cast<double>(in * out) / 64.0;
  const double error = (tm::dequantize_nf4(q).to(torch::kFloat) - weight.to(torch::kFloat)).abs().max().item<double>();
  std::printf("%6lld x %6lld x %6lld  dense %9.2f ms  nf4 %9.2f ms  ratio %5.2fx  dequantize %8.2f ms (%6.2f GB/s)  "
              "max |W - dq(q(W))| %.4f\n",
              static_cast<long long>(rows), static_cast<long long>(in), static_cast<long long>(out), dense, nf4,
              nf4 / dense, dequant, bytes / (dequant * 1e-3) / 1e9, error);
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = torch::cuda::is_available();
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  std::vector<std::vector<int64_t>> shapes;
  if (argc > 1) {
    if ((argc - 1) % 3 != 0) {
      std::fprintf(stderr, "usage: nf4_bench [rows in out ...] (triples of positive integers)\n");
      return 2;
    }
    for (int i = 1; i < argc; i += 3) {
      std::vector<int64_t> shape;
      for (int j = 0; j < 3; ++j) {
        char* end = nullptr;
        const long long value = std::strtoll(argv[i + j], &end, 10);
        if (end == argv[i + j] || *end != '\0' || value <= 0) {
          std::fprintf(stderr, "nf4_bench: \"%s\" is not a positive integer\n", argv[i + j]);
          return 2;
        }
        shape.push_back(value);
      }
      shapes.push_back(shape);
    }
  } else {
    shapes = {{512, 2048, 2048}, {512, 4096, 4096}};
    if (cuda) shapes.push_back({2048, 4096, 11008});
  }
  std::printf("NF4 linear vs bf16 linear, forward + dX, on %s (median of %d)\n", cuda ? "CUDA" : "the CPU", kTimed);
  for (const std::vector<int64_t>& s : shapes) run_shape(s[0], s[1], s[2], device);
  return 0;
}
