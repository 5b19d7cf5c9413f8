// AdamW sharded over the ranks of a data-parallel job as DeepSpeed's ZeRO
// stages 1 and 2 shard it (Rajbhandari et al. 2020, "ZeRO", Sec. 5.1-5.2;
// deepspeed/runtime/zero/stage_1_and_2.py), over a Communicator
// (executor/communicator.h). The split is executor/zero_layout.h's.
//
// Stage 1: each rank keeps the fp32 master weights and both moments of its
// partition only. Backward leaves every gradient whole on every rank; the step
// reduce-scatters them bucket by bucket, updates the partition and all-gathers
// the updated 16-bit parameters.
// Stage 2: the gradients are partitioned too. A post-accumulate-grad hook
// copies each gradient into its bucket as backward produces it and frees it;
// a full bucket is reduce-scattered at once, its chunk added into the rank's
// gradient partition. As in DeepSpeed, this happens on every micro-step of an
// accumulation (stage 2 has no no_sync: a rank cannot hold a partition and the
// whole gradients too).
// Stage 3: the parameters themselves are partitioned too
// (executor/zero3_parameters.h). Each parameter is a bucket of its own, so a
// rank's chunk of it is exactly the parameter's partition (DeepSpeed's
// per-parameter ds_tensor); gradients are reduce-scattered as at stage 2, and
// the step updates the partitions in place instead of all-gathering anything.
// With CPU offload (ZeRO-Offload) the partition's master weights, moments and
// fp32 gradients live in host memory and cpu_adamw_step updates them.
//
// The update is MixedAdamW's (torch.optim.AdamW), element by element, so a job
// of N ranks trains as one process does on the same global batch, up to the
// order of the gradient sums. Each rank checkpoints its own partition
// (executor/sharded_checkpoint.h); assembled, the parts are MixedAdamW's
// format, so they resume on any number of ranks.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/communicator.h"
#include "executor/cpu_adamw.h"
#include "executor/mixed_adamw.h"
#include "executor/optimizer.h"
#include "executor/zero_layout.h"

namespace headroom::executor {

struct ZeroAdamWOptions {
  // As one process's AdamW: hyperparameters, master weights, CPU offload (then
  // of the partition), CPU threads.
  MixedAdamWOptions adam;
  int stage = 1;                          // 1, 2 or 3
  int64_t bucket_elements = 500'000'000;  // DeepSpeed's reduce_bucket_size (stages 1 and 2)
  std::vector<PartitionedParameter> partitioned;  // stage 3: each parameter's partition, in order
};

class ZeroAdamW final : public Optimizer {
 public:
  // `parameters`: every trainable parameter, in the same order on every rank,
  // all of one dtype. `communicator` must outlive the optimizer. Collective
  // failures throw StatusError (executor/status_error.h) naming the collective.
  ZeroAdamW(NamedParameters parameters, Communicator& communicator, ZeroAdamWOptions options);
  ~ZeroAdamW() override;
  ZeroAdamW(const ZeroAdamW&) = delete;
  ZeroAdamW& operator=(const ZeroAdamW&) = delete;

  bool step(double grad_scale, bool check_finite) override;  // grad_scale excludes the 1/world average
  void zero_grad() override;
  void backward_done() override;
  int64_t steps_taken() const override { return steps_; }
  int64_t state_bytes() const override;       // this rank's partition
  int64_t checkpoint_bytes() const override;  // the whole state
  // This rank's partition: each state's slice of every parameter it owns elements of.
  std::string save() const override;
  void load(const std::string& bytes, const std::string& origin) override;  // the whole state
  bool partitioned() const override { return true; }
  bool load_partition(const std::string& bytes, const std::string& origin) override;

  // Stages 2 and 3, from the gradient hook: parameter `index` has its gradient.
  void gradient_ready(size_t index);
  const ZeroLayout& layout() const { return layout_; }

 private:
  void reduce_bucket(size_t bucket);
  void ensure_gradient_partition();
  torch::Tensor own_parameters() const;  // this rank's chunks of the parameters, flat
  void publish(const torch::Tensor& partition);
  std::vector<std::pair<const char*, torch::Tensor>> states() const;
  void check(const Status& status, const char* what) const;
  bool partitions_gradients() const { return options_.stage >= 2; }

  NamedParameters parameters_;
  std::vector<std::vector<int64_t>> shapes_;  // each parameter's whole shape
  Communicator& comm_;
  ZeroAdamWOptions options_;
  ZeroLayout layout_;
  torch::ScalarType dtype_;
  torch::Device device_;
  torch::Tensor master_;      // fp32 partition, when kept (device, or host under offload)
  torch::Tensor exp_avg_;     // fp32, or the parameters' dtype without master weights
  torch::Tensor exp_avg_sq_;
  torch::Tensor gradients_;   // the reduced gradient partition; undefined between steps
  std::vector<int64_t> pending_;  // stage 2: gradients each bucket still waits for
  std::vector<char> ready_;       // stage 2: which parameters' gradients are in
  int64_t steps_ = 0;
};

}  // namespace headroom::executor
