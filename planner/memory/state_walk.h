// The walk over a run's parameters that model_states (model_states.h) makes:
// the run's choices, decided once, and the sums its steps add. Internal to
// planner/memory/: the per-parameter steps are in model_states.cc, the sharded
// stacks' partitions and buffers in sharded_states.cc, the optimizer step and the
// host and disk bytes in step_and_host_states.cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "planner/memory/state_bytes.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// One pass over the parameters: the run's choices, decided once, and the sums
// the walk's steps (model_states.cc, sharded_states.cc, step_and_host_states.cc)
// add to `out`.
struct StateWalk {
  const graph::LayerGraph& graph;
  const RunSettings& settings;
  const GlobalConfig& config;
  Accounting accounting;
  ModelStates out;
  int world = 1;  // what ZeRO divides by: the shard group (every GPU unless hybrid sharding)
  Precision precision = Precision::kFp32;
  bool shard_optimizer = false;
  bool shard_grads = false;
  bool shard_params = false;
  bool optimizer_on_gpu = true;
  bool params_on_gpu = true;
  bool torchao_offload = false;  // torchao's CPUOffloadOptimizer: host optimizer per large parameter, no ZeRO
  bool keep_gpu_grads = false;
  bool fsdp = false;  // torch's FSDPs (1 and 2) shard the same units: each layer, and the root (in_fsdp2_root)
  bool upcast_trainable = false;  // Accelerate's fp32 upcast of trainable parameters (fsdp_upcasts_trainable)
  // DeepSpeed's ZeRO keeps a rank's partition of the fp32 master weights, of
  // each optimizer state and of the gradients as one flat buffer each (stage
  // 1/2: single_partition_of_fp32_groups and its states, the averaged gradient
  // partition, runtime/zero/stage_1_and_2.py; stage 3: fp32_partitioned_groups_flat
  // per sub-group and grad_partitions_flat_buffer, runtime/zero/stage3.py), so
  // the allocator rounds each once, not once per parameter. FSDP's shards are
  // tensors of their own (FSDP2's DTensors, FSDP1's FlatParameter per unit).
  bool flat_partitions = false;
  std::map<std::string, int> shared;  // shared_gradient_first_block
  int64_t host_optimizer = 0;
  int64_t host_params = 0;
  int64_t checkpoint_weights = 0;
  int64_t checkpoint_optimizer = 0;
  int64_t largest_state = 0;  // one state tensor of the largest trainable parameter (rank share)
  int64_t largest_grad = 0;
  int64_t largest_adafactor_step = 0;  // adafactor_fp32_temporaries of the worst parameter
  bool bnb_maps = false;  // an 8-bit state on the device: the optimizer's two quantization maps there
  int64_t flat_states = 0, flat_master = 0, flat_grads = 0;
  // FSDP2: each group's sharded gradient bytes before rounding (per block; the root's).
  std::vector<int64_t> fsdp_shard_grads;
  int64_t fsdp_root_shard_grads = 0;

  StateWalk(const graph::LayerGraph& g, const RunSettings& s, const GlobalConfig& c, Accounting a);
  int64_t account_bytes(int64_t bytes) const { return account(bytes, accounting); }
  bool in_root(const graph::Node& node) const;  // in FSDP2's root group (fsdp_units.h in_fsdp2_root)
};

// A paged optimizer: asked for (paged_optimizer), or the one litgpt's QLoRA makes.
bool pages_states(const RunSettings& settings);

}  // namespace headroom::planner
