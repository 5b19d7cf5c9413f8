// The sharded stacks' share of a state walk (state_walk.h): ZeRO's flat
// partitions, FSDP's sharded gradients and units in flight, DeepSpeed's buckets,
// FSDP's unsharded gradients under no_sync, ZeRO-2's step copies. Sources in
// docs/memory-model.md ("Model states") and docs/stacks.md.
#pragma once

#include <cstdint>

#include "planner/memory/state_walk.h"

namespace headroom::planner {

// ZeRO's flat partitions, each rounded once; bitsandbytes' shared quantization maps.
void close_partitions(StateWalk& w);
// FSDP's sharded gradients, one allocation per group.
void close_fsdp_grads(StateWalk& w);
// DeepSpeed's reduce bucket and ZeRO-3's gathered and prefetched parameters.
void add_deepspeed_buffers(StateWalk& w);
// torch's FSDPs: the units in flight, the root group, the reduce-scatter inputs.
void add_fsdp_buffers(StateWalk& w);
// FSDP accumulating under no_sync: the unsharded gradients kept to the last micro-step.
void add_unsynced_grads(StateWalk& w);
// DeepSpeed ZeRO-2's gradient copies in its step on the GPU (0 elsewhere).
int64_t zero2_step_grad_copies(const StateWalk& w);

}  // namespace headroom::planner
