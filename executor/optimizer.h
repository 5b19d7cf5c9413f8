// The optimizer the trainer steps, one per planner::OptimizerKind it can run:
// AdamW (executor/mixed_adamw.h, also offloaded to the CPU), SGD with momentum
// (executor/sgd.h), Adafactor (executor/adafactor.h) and bitsandbytes' 8-bit
// AdamW (executor/adamw8bit.h). Each allocates its states, and fp32 master
// weights where the planner counts them (planner::master_bytes_per_element), in
// its constructor, so the bytes it adds are measurable before the first step
// and compare with the planner's `optimizer + master` (docs/executor.md).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "planner/settings/run_settings.h"

namespace headroom::executor {

class Communicator;  // executor/communicator.h

using NamedParameters = std::vector<std::pair<std::string, torch::Tensor>>;

// ZeRO-3 (executor/zero3_parameters.h): a parameter whose data is empty, and
// this rank's chunk of it: elements [rank x shard.numel(), ...) of the
// flattened parameter, zero-padded, which the optimizer reads and updates.
struct PartitionedParameter {
  torch::Tensor shard;
  std::vector<int64_t> shape;  // the whole parameter's
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One step with every gradient multiplied by `grad_scale` first (1 / loss
  // scale). With `check_finite` a step whose gradients hold inf/NaN changes
  // nothing and returns false (fp16 loss scaling).
  virtual bool step(double grad_scale, bool check_finite) = 0;
  virtual void zero_grad() = 0;  // drops gradients (set to none)
  // After each micro-step's backward: a sharded optimizer reduces what its
  // gradient hooks have not (executor/zero_adamw.h).
  virtual void backward_done() {}

  virtual int64_t steps_taken() const = 0;
  // Bytes of the states and master weights (what a checkpoint of them holds).
  virtual int64_t state_bytes() const = 0;
  // Bytes of the states a checkpoint holds: every rank's, for a sharded optimizer.
  virtual int64_t checkpoint_bytes() const { return state_bytes(); }
  // Serialized state for checkpoints: the whole state, or, for a partitioned
  // optimizer, this rank's partition as a rank part (executor/sharded_checkpoint.h).
  // load() reads a whole state (one process's, or a partitioned optimizer's
  // assembled) and keeps what this rank holds; it checks the optimizer, names
  // and shapes (the parameters themselves come from the model part) and throws
  // StatusError (kInvalidInput, executor/status_error.h) naming `origin` when they differ.
  virtual std::string save() const = 0;
  virtual void load(const std::string& bytes, const std::string& origin) = 0;
  // Whether each rank saves its own partition (ZeRO): then save() is this rank's part.
  virtual bool partitioned() const { return false; }
  // A partitioned optimizer reads its own rank part back when it was written
  // by a job of the same ranks and layout; false (nothing changed) otherwise,
  // and the caller assembles the whole state from every rank's part instead.
  virtual bool load_partition(const std::string& /*bytes*/, const std::string& /*origin*/) { return false; }
};

struct OptimizerOptions {
  planner::OptimizerKind kind = planner::OptimizerKind::kAdamW;
  double learning_rate = 1e-3;
  double weight_decay = 0.0;
  bool master_weights = false;  // fp32 master copies of 16-bit parameters
  bool offload_to_cpu = false;  // ZeRO-Offload: AdamW only (run_checks.cc refuses the others)
  int cpu_threads = 0;          // for the CPU AdamW step; 0 = all cores
  // Several ranks at ZeRO stage 1 or 2: AdamW partitioned over `communicator`'s
  // ranks (executor/zero_adamw.h), which must outlive the optimizer. Null, one
  // rank, or stage 0: every rank steps the whole optimizer. Stage 3 (any
  // number of ranks): `partitioned` holds each parameter's partition, in the
  // order of the parameters.
  Communicator* communicator = nullptr;
  int zero_stage = 0;
  std::vector<PartitionedParameter> partitioned;
  int64_t reduce_bucket_elements = 500'000'000;  // DeepSpeed's reduce_bucket_size
};

// The optimizer of `options.kind` over `parameters` (name, tensor of every
// trainable parameter), partitioned over ranks as `options` says. Throws
// std::invalid_argument for a kind the executor does not run, or does not
// partition (check_executable refuses those plans first).
std::unique_ptr<Optimizer> make_optimizer(NamedParameters parameters, const OptimizerOptions& options);

// ---- Shared by the optimizers (composition, not a base class) ----

// The tensors an optimizer updates: each trainable parameter and, where kept,
// its fp32 master copy, which the update then writes and copies back.
class UpdatedWeights {
 public:
  UpdatedWeights(NamedParameters parameters, bool master_weights);

  size_t size() const { return entries_.size(); }
  const std::string& name(size_t i) const { return entries_[i].name; }
  const torch::Tensor& parameter(size_t i) const { return entries_[i].param; }
  // What the update writes: the fp32 master, or the parameter itself.
  torch::Tensor& weights(size_t i);
  // The gradient in the weights' dtype times `grad_scale`; undefined when the
  // parameter has none this step.
  torch::Tensor gradient(size_t i, double grad_scale) const;
  // After the update: the parameter takes the master's values (rounded).
  void publish(size_t i);

  bool gradients_finite(double grad_scale) const;
  void zero_grad();
  int64_t master_bytes() const;
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive, const std::string& origin);

 private:
  struct Entry {
    std::string name;
    torch::Tensor param;   // the model's tensor (device, training dtype)
    torch::Tensor master;  // fp32 copy, when kept
  };
  std::vector<Entry> entries_;
};

// Checkpoint helpers: a marker naming the optimizer that wrote the state, so a
// checkpoint of another optimizer is refused by name, and reads that check
// presence and shape before copying into the live tensor.
void write_optimizer_kind(torch::serialize::OutputArchive& archive, planner::OptimizerKind kind);
// `legacy_ok`: a state with no marker at all is accepted (AdamW's, written
// before there were others).
void check_optimizer_kind(torch::serialize::InputArchive& archive, planner::OptimizerKind kind,
                          const std::string& origin, bool legacy_ok = false);
// The same marker as a header entry of a rank part (executor/sharded_checkpoint.h), and its check.
std::pair<std::string, torch::Tensor> optimizer_kind_marker(planner::OptimizerKind kind);
void check_optimizer_kind_marker(const std::map<std::string, torch::Tensor>& header, planner::OptimizerKind kind,
                                 const std::string& origin);
void read_state(torch::serialize::InputArchive& archive, const std::string& key, torch::Tensor& into,
                const std::string& origin);

// Named state tensors: a parameter's ("row_var", "state1", ...) or the whole
// optimizer's ("started"). Handles of the live tensors, so a load fills them.
using StateTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The checkpoint every optimizer but AdamW writes: its kind, the step count,
// `shared` tensors, each parameter's as "<parameter>/<state>", and the master
// weights.
std::string save_optimizer_state(planner::OptimizerKind kind, int64_t steps, const StateTensors& shared,
                                 const std::vector<StateTensors>& per_parameter, const UpdatedWeights& weights);
// Reads such a checkpoint into the same tensors, each checked for presence,
// shape and dtype (read_state); returns the step count.
int64_t load_optimizer_state(const std::string& bytes, const std::string& origin, planner::OptimizerKind kind,
                             const StateTensors& shared, const std::vector<StateTensors>& per_parameter,
                             UpdatedWeights& weights);

}  // namespace headroom::executor
