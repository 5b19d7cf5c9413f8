// AdamW as the planner counts it (planner/memory/model_states.cc): on the device with
// fp32 master weights beside 16-bit parameters under mixed precision, or
// offloaded to the CPU (ZeRO-Offload: fp32 master, moments and gradients in
// host memory; 16-bit gradients stream to the host as backward produces them
// and the updated 16-bit parameters are copied back), stepped by the
// vectorised cpu_adamw_step. The update is torch.optim.AdamW's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/cpu_adamw.h"
#include "executor/optimizer.h"

namespace headroom::executor {

struct MixedAdamWOptions {
  AdamWHyper hyper;
  bool master_weights = false;  // fp32 master copies of 16-bit parameters
  bool offload_to_cpu = false;  // states (and master weights) in host memory, CPU step
  int cpu_threads = 0;          // for the CPU step; 0 = all cores
};

// torch.optim.AdamW's update, single-tensor path (amsgrad=False): decoupled
// decay, lerp for the first moment, bias-corrected denominator, in place on
// `weights` and both moments after `step` steps (1-based). `grad` has the
// weights' dtype and is already scaled. MixedAdamW steps each parameter with
// it, ZeroAdamW (executor/zero_adamw.h) a rank's partition: one arithmetic, so
// both train alike.
void adamw_update(const torch::Tensor& weights, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                  const torch::Tensor& grad, const AdamWHyper& hyper, int64_t step);

// The cpu_adamw_step element kind of a dtype: bf16, fp16, or kNone (fp32).
HalfKind half_kind(torch::ScalarType type);

class MixedAdamW final : public Optimizer {
 public:
  // `parameters`: (name, tensor) of every trainable parameter. States are
  // allocated here, so their memory is measurable before the first step.
  MixedAdamW(std::vector<std::pair<std::string, torch::Tensor>> parameters, MixedAdamWOptions options);
  ~MixedAdamW() override;
  MixedAdamW(const MixedAdamW&) = delete;
  MixedAdamW& operator=(const MixedAdamW&) = delete;

  // Optimizer's contract; zero_grad also clears the host gradients under offload.
  bool step(double grad_scale, bool check_finite) override;
  void zero_grad() override;
  int64_t steps_taken() const override { return steps_; }
  int64_t state_bytes() const override;  // moments and master weights
  // Moments, master weights, step count.
  std::string save() const override;
  void load(const std::string& bytes, const std::string& origin) override;

 private:
  struct Slot;
  bool grads_finite(double grad_scale) const;
  std::vector<std::unique_ptr<Slot>> slots_;
  MixedAdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace headroom::executor
