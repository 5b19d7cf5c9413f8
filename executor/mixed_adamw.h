// AdamW as the planner counts it (planner/model_states.cc): on the device with
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

namespace headroom::executor {

struct MixedAdamWOptions {
  AdamWHyper hyper;
  bool master_weights = false;  // fp32 master copies of 16-bit parameters
  bool offload_to_cpu = false;  // states (and master weights) in host memory, CPU step
  int cpu_threads = 0;          // for the CPU step; 0 = all cores
};

class MixedAdamW {
 public:
  // `parameters`: (name, tensor) of every trainable parameter. States are
  // allocated here, so their memory is measurable before the first step.
  MixedAdamW(std::vector<std::pair<std::string, torch::Tensor>> parameters, MixedAdamWOptions options);
  ~MixedAdamW();
  MixedAdamW(const MixedAdamW&) = delete;
  MixedAdamW& operator=(const MixedAdamW&) = delete;

  // One step with every gradient multiplied by `grad_scale` first (1 / loss
  // scale). With `check_finite` a step whose gradients hold inf/NaN changes
  // nothing and returns false (fp16 loss scaling).
  bool step(double grad_scale, bool check_finite);
  void zero_grad();  // drops gradients (set to none), device and host

  int64_t steps_taken() const { return steps_; }
  // Bytes of the moments and master weights (what a checkpoint of them holds).
  int64_t state_bytes() const;
  // Serialized state (moments, master weights, step count) for checkpoints;
  // load() checks names and shapes (the parameters come from the model part).
  std::string save() const;
  void load(const std::string& bytes, const std::string& origin);

 private:
  struct Slot;
  bool grads_finite(double grad_scale) const;
  std::vector<std::unique_ptr<Slot>> slots_;
  MixedAdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace headroom::executor
