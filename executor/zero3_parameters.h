// ZeRO stage 3's partitioned parameters (issue 11), as DeepSpeed partitions
// and gathers them (Rajbhandari et al. 2020, "ZeRO", Sec. 5.3;
// deepspeed/runtime/zero/partition_parameters.py, partitioned_param_coordinator.py,
// parameter_offload.py). Only built with LibTorch.
//
// Every parameter of the module, trainable or frozen, is cut into one chunk
// per rank: rank r keeps elements [r c, (r + 1) c) of the flattened parameter,
// c = ceil(numel / world), zero-padded, in the parameter's dtype (DeepSpeed's
// ds_tensor, _partition_param), and the parameter's own data becomes an empty
// tensor (free_param). The planner prices exactly this: ceil_div(bytes, world)
// per parameter (planner/memory/model_states.cc).
//
// A block's parameters are all-gathered just before its forward and freed after
// it; in backward they are gathered again before the block's backward (its
// recompute included, for a checkpointed block) by a hook on the gradient of
// the block's outputs, and freed when the backward moves on to the next block.
// The next block in the order forward runs them (the graph's block order,
// embeddings and head included) is prefetched, up to prefetch_elements and
// never beyond max_live_elements (stage3_prefetch_bucket_size,
// stage3_max_live_parameters). Gloo's collectives are synchronous here, so the
// prefetch takes the memory the planner prices without hiding any time.
//
// Autograd saves views of gathered weights (a linear's weight.t()); a saved view
// would keep the whole gathered parameter alive until backward. The saved
// tensors of a gathered parameter are therefore kept as a reference (parameter,
// sizes, strides, offset) and rebuilt over the parameter gathered again in
// backward (DeepSpeed keeps the parameter instead of the view for the same
// reason: LinearFunctionForZeroStage3, deepspeed/runtime/zero/linear.py).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "executor/communicator.h"
#include "executor/offload.h"
#include "executor/optimizer.h"
#include "graph/layer_graph.h"
#include "models/torch/layers.h"
#include "planner/predict/plan.h"

namespace headroom::executor {

struct Zero3Options {
  int64_t prefetch_elements = 50'000'000;     // DeepSpeed stage3_prefetch_bucket_size
  int64_t max_live_elements = 1'000'000'000;  // DeepSpeed stage3_max_live_parameters
};

struct Zero3Stats {
  int64_t gathers = 0;           // parameter all-gathers
  int64_t late_gathers = 0;      // of those, for a saved tensor whose block was not gathered (0 expected)
  int64_t live_bytes = 0;        // gathered bytes now (padded to world x chunk)
  int64_t peak_live_bytes = 0;   // since reset_peak()
};

class Zero3Parameters final : public SavedTensorRedirect {
 public:
  // Partitions every parameter of `module`. `block_of` names each parameter's
  // block (its index in the graph's block order, which is the order forward
  // runs them; a tied parameter lists every block that uses it), `blocks` the
  // block names in that order. A parameter missing from `block_of` is an
  // std::invalid_argument. `communicator` must outlive this.
  Zero3Parameters(torch::nn::Module& module, const std::map<std::string, std::vector<int>>& block_of,
                  std::vector<std::string> blocks, Communicator& communicator, Zero3Options options);
  ~Zero3Parameters() override;
  Zero3Parameters(const Zero3Parameters&) = delete;
  Zero3Parameters& operator=(const Zero3Parameters&) = delete;

  // `inner` (the plan's runner) with the gathering around each block. The
  // model must run every block of `blocks` through it.
  models::torch_modules::BlockRunner runner(models::torch_modules::BlockRunner inner);
  // After each micro-step's backward: frees what is still gathered.
  void backward_done();

  // A trainable parameter's partition (shared with the optimizer) and shape.
  PartitionedParameter partition_of(const torch::Tensor& parameter) const;
  // Bytes of every parameter's partition on this rank.
  int64_t partition_bytes() const;
  const Zero3Stats& stats() const { return stats_; }
  void reset_peak() { stats_.peak_live_bytes = stats_.live_bytes; }

  std::unique_ptr<torch::autograd::SavedVariableHooks> hooks(
      std::unique_ptr<torch::autograd::SavedVariableHooks> otherwise) override;

  // Implementation, for the saved-tensor hooks and the backward hooks.
  struct Param {
    torch::Tensor tensor;       // the module's parameter (empty data while partitioned)
    std::vector<int64_t> shape;
    int64_t numel = 0;
    int64_t chunk = 0;          // elements per rank
    torch::Tensor shard;        // this rank's chunk
    torch::Tensor gathered;     // world x chunk elements while gathered
    std::vector<int> blocks;
  };
  int param_of_storage(const void* data) const;  // -1: not a gathered parameter
  torch::Tensor gathered_storage_of(int param);   // gathers it when it is not
  void before_backward(int block);

 private:
  void gather(int param);
  void release(int param);
  void ensure(int block);
  void prefetch(int block);
  void release_except(const std::set<int>& keep);
  int next_block(int block, int step) const;

  Communicator& comm_;
  Zero3Options options_;
  std::vector<std::string> blocks_;
  std::map<std::string, int> block_index_;
  std::vector<Param> params_;
  std::vector<std::vector<int>> params_of_block_;
  std::map<const void*, int> by_storage_;  // gathered storages
  std::vector<char> needs_backward_;       // per block, this micro-step: its outputs require grad
  int backward_block_ = 1 << 30;           // the block whose backward runs; past the end between steps
  int64_t live_elements_ = 0;
  Zero3Stats stats_;
};

// `module` partitioned as `plan` (ZeRO stage 3) says, its parameters placed in
// `graph`'s blocks by name, over `communicator`'s ranks.
std::unique_ptr<Zero3Parameters> partition_parameters(torch::nn::Module& module, const graph::LayerGraph& graph,
                                                      const planner::Plan& plan, Communicator& communicator);

}  // namespace headroom::executor
