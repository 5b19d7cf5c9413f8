#include "planner/memory/deepspeed_buckets.h"

#include "planner/settings/stack.h"

namespace headroom::planner {

int64_t deepspeed_reduce_bucket_bytes(const RunSettings& settings, const GlobalConfig& config,
                                      Accounting accounting) {
  const bool shard_params = config.zero_stage >= 3 || fsdp_shards_params(settings, config.zero_stage);
  const bool fsdp = shard_params && shards_with_fsdp(settings);
  const bool optimizer_on_gpu = config.offload_optimizer == Offload::kNone;
  const bool torchao_offload = !optimizer_on_gpu && settings.cpu_offload != CpuOffloadImpl::kZeroOffload;
  // ZeRO-2/3 reduce through the bucket; ZeRO-Offload copies gradients to the host through it.
  const bool has_bucket = (config.zero_stage >= 2 || (!optimizer_on_gpu && !torchao_offload)) && !fsdp;
  if (!has_bucket) return 0;
  // stage_1_and_2.py setup_buckets: torch.empty(int(self.reduce_bucket_size), ...);
  // stage3.py __init__: torch.empty(self.reduce_bucket_size, ...), in the 16-bit dtype.
  return account(settings.reduce_bucket_elements * grad_bytes_per_element(settings.precision), accounting);
}

int64_t deepspeed_backward_bucket_bytes(const RunSettings& settings, const GlobalConfig& config,
                                        Accounting accounting) {
  if (config.zero_stage >= 3 || shards_with_fsdp(settings)) return 0;
  // "Use double buffers to avoid data access conflict when overlap_comm is enabled."
  return (settings.overlap_comm ? 2 : 1) * deepspeed_reduce_bucket_bytes(settings, config, accounting);
}

}  // namespace headroom::planner
