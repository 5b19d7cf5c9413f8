// Throughput of headroom's CPU AdamW step (executor/cpu_adamw.h) against
// LibTorch's own AdamW on the CPU, measured in the same run on the same data:
//   torch::optim::AdamW   the C++ frontend optimizer (one ATen op per line);
//   torch ops (Python)    the op sequence of Python's torch.optim.AdamW on CPU
//                         tensors (its default single-tensor path: mul_, lerp_,
//                         mul_/addcmul_, sqrt/div/add_, addcdiv_); the foreach path
//                         does the same work for one tensor;
//   at::_fused_adamw_     the fused kernel behind torch.optim.AdamW(fused=True).
// Each variant starts from the same parameters, takes the same gradients for the
// same number of steps, and the largest |param - ours| is printed.
//
// Usage: cpu_adamw_bench [million_params ...] (default 16 64). Traffic counts the
// bytes a single pass must move (fp32 master, exp_avg, exp_avg_sq read and
// written, the gradient read, the 16-bit copy written): 28 B/element with fp32
// grads, 32 with bf16 grads and a bf16 copy.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "executor/cpu_adamw.h"
#include "executor/mixed_adamw.h"

namespace {

using headroom::executor::adamw_update;
using headroom::executor::AdamWHyper;
using headroom::executor::HalfKind;

constexpr int kWarmupSteps = 1;
constexpr int kTimedSteps = 5;

// Median seconds of kTimedSteps calls of step(k), k counting on after the warm-up.
double median_seconds(const std::function<void(int64_t)>& step) {
  int64_t k = 1;
  for (int i = 0; i < kWarmupSteps; ++i) step(k++);
  std::vector<double> seconds;
  for (int i = 0; i < kTimedSteps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step(k++);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

struct Row {
  std::string name;
  double seconds;
  double bytes_per_element;
  double max_abs_diff;  // against headroom's fp32-grad result; < 0: not compared
};

void print_row(const Row& row, int64_t n, double baseline_seconds) {
  const double elements_per_s = static_cast<double>(n) / row.seconds;
  std::printf("  %-34s %9.2f ms  %8.1f M elem/s  %6.2f GB/s  x%5.2f vs torch::optim::AdamW",
              row.name.c_str(), row.seconds * 1e3, elements_per_s / 1e6,
              elements_per_s * row.bytes_per_element / 1e9, baseline_seconds / row.seconds);
  if (row.max_abs_diff >= 0) std::printf("  max|dp| %.3g", row.max_abs_diff);
  std::printf("\n");
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

void bench_size(int64_t n, const AdamWHyper& h) {
  std::printf("n = %lld parameters (%.0f MiB of fp32 state)\n", static_cast<long long>(n),
              static_cast<double>(n) * 12 / (1 << 20));
  torch::manual_seed(0);
  const torch::Tensor initial = torch::randn({n});
  const torch::Tensor grad = torch::randn({n}) * 1e-3;
  const int64_t steps = kWarmupSteps + kTimedSteps;

  // headroom, fp32 gradients.
  torch::Tensor ours = initial.clone();
  torch::Tensor m = torch::zeros({n}), v = torch::zeros({n});
  const double ours_s = median_seconds([&](int64_t k) {
    headroom::executor::cpu_adamw_step(ours.data_ptr<float>(), m.data_ptr<float>(),
                                       v.data_ptr<float>(), grad.data_ptr<float>(), HalfKind::kNone,
                                       1.0f, nullptr, HalfKind::kNone, n, k, h, 0);
  });

  // headroom, bf16 gradients in and a bf16 parameter copy out (the offload case).
  torch::Tensor ours16 = initial.clone();
  torch::Tensor m16 = torch::zeros({n}), v16 = torch::zeros({n});
  const torch::Tensor grad16 = grad.to(torch::kBFloat16);
  torch::Tensor param16 = torch::empty({n}, torch::kBFloat16);
  const double ours16_s = median_seconds([&](int64_t k) {
    headroom::executor::cpu_adamw_step(ours16.data_ptr<float>(), m16.data_ptr<float>(),
                                       v16.data_ptr<float>(), grad16.data_ptr(), HalfKind::kBf16,
                                       1.0f, param16.data_ptr(), HalfKind::kBf16, n, k, h, 0);
  });

  // torch::optim::AdamW.
  torch::Tensor frontend = initial.clone().set_requires_grad(true);
  frontend.mutable_grad() = grad.clone();
  torch::optim::AdamW optimizer(std::vector<torch::Tensor>{frontend},
                                torch::optim::AdamWOptions(h.lr)
                                    .betas({h.beta1, h.beta2})
                                    .eps(h.eps)
                                    .weight_decay(h.weight_decay));
  const double frontend_s = median_seconds([&](int64_t) { optimizer.step(); });

  // Python's torch.optim.AdamW CPU path (torch/optim/adam.py, _single_tensor_adam), as ATen ops:
  // the executor's own device update (executor/mixed_adamw.h adamw_update).
  torch::NoGradGuard no_grad;
  torch::Tensor python = initial.clone();
  torch::Tensor pm = torch::zeros({n}), pv = torch::zeros({n});
  const double python_s = median_seconds([&](int64_t k) { adamw_update(python, pm, pv, grad, h, k); });

  // at::_fused_adamw_ (the step count lives in a tensor, incremented first as Python does).
  torch::Tensor fused = initial.clone();
  torch::Tensor fm = torch::zeros({n}), fv = torch::zeros({n}), fstep = torch::zeros({});
  const double fused_s = median_seconds([&](int64_t) {
    fstep.add_(1);
    at::_fused_adamw_({fused}, {grad}, {fm}, {fv}, {}, {fstep}, h.lr, h.beta1, h.beta2,
                      h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false);
  });

  const std::vector<Row> rows = {
      {"torch::optim::AdamW", frontend_s, 28, max_abs_diff(frontend.detach(), ours)},
      {"torch ops (Python AdamW CPU path)", python_s, 28, max_abs_diff(python, ours)},
      {"at::_fused_adamw_", fused_s, 28, max_abs_diff(fused, ours)},
      {"headroom cpu_adamw_step, fp32 grad", ours_s, 28, 0.0},
      {"headroom, bf16 grad + bf16 copy", ours16_s, 32, max_abs_diff(ours16, ours)},
  };
  for (const Row& row : rows) print_row(row, n, frontend_s);
  std::printf("  (%lld steps each; bf16 row: its grads are rounded, so it differs by more)\n\n",
              static_cast<long long>(steps));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> millions;
  for (int i = 1; i < argc; ++i) millions.push_back(std::atoll(argv[i]));
  if (millions.empty()) millions = {16, 64};
  const AdamWHyper hyper{
      .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
  std::printf(
      "cpu_adamw_bench: torch %s, %d torch intra-op threads, %u hardware threads (headroom uses "
      "all)\n",
      TORCH_VERSION, at::get_num_threads(), std::thread::hardware_concurrency());
  std::printf(
      "median of %d steps after %d warm-up; ratio = torch::optim::AdamW time / this time\n\n",
      kTimedSteps, kWarmupSteps);
  for (int64_t million : millions) bench_size(million * (int64_t{1} << 20), hyper);
  return 0;
}
