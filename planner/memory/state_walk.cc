#include "planner/memory/state_walk.h"

#include "planner/mechanisms/litgpt_model.h"
#include "planner/memory/fsdp_units.h"
#include "planner/settings/stack.h"

namespace headroom::planner {

StateWalk::StateWalk(const graph::LayerGraph& g, const RunSettings& s, const GlobalConfig& c, Accounting a)
    : graph(g), settings(s), config(c), accounting(a) {
  world = s.shard_group_size();
  precision = s.precision;
  shard_optimizer = c.zero_stage >= 1;
  shard_grads = c.zero_stage >= 2;
  shard_params = c.zero_stage >= 3 || fsdp_shards_params(s, c.zero_stage);
  optimizer_on_gpu = c.offload_optimizer == Offload::kNone;
  params_on_gpu = c.offload_param == Offload::kNone;
  torchao_offload = !optimizer_on_gpu && s.cpu_offload != CpuOffloadImpl::kZeroOffload;
  keep_gpu_grads = s.cpu_offload == CpuOffloadImpl::kTorchao;
  fsdp = shard_params && shards_with_fsdp(s);
  upcast_trainable = fsdp && fsdp_upcasts_trainable(s, c.zero_stage);
  flat_partitions = shard_optimizer && !fsdp;
  shared = shared_gradient_first_block(g);
  out.block_grads.assign(g.blocks.size(), 0);
  if (fsdp) out.fsdp2_root_grads.assign(g.blocks.size(), 0);
  if (fsdp) fsdp_shard_grads.assign(g.blocks.size(), 0);
}

bool StateWalk::in_root(const graph::Node& node) const { return in_fsdp2_root(graph, node.block, settings); }

bool pages_states(const RunSettings& settings) {
  return settings.paged_optimizer || litgpt_paged_adamw(settings);
}

}  // namespace headroom::planner
