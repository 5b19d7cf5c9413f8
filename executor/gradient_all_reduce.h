// Plain data parallelism (ZeRO stage 0 on several ranks, as DDP and DeepSpeed
// stage 0 run it): after the last micro-step's backward every rank holds its
// own gradients whole; one all-reduce per bucket (executor/zero_layout.h's
// buckets, reduce_bucket_size elements) sums them, so every rank steps its
// whole optimizer on the same gradients. The 1/world of the mean is left to
// the optimizer's grad_scale. Earlier micro-steps reduce nothing (DDP's
// no_sync).
#pragma once

#include <cstdint>

#include "executor/communicator.h"
#include "executor/optimizer.h"

namespace headroom::executor {

// Sums every gradient over the ranks in place. A parameter without a gradient
// contributes zeros and stays without one. All trainable parameters share one
// dtype and device.
Status all_reduce_gradients(const NamedParameters& parameters, Communicator& communicator, int64_t bucket_elements);

}  // namespace headroom::executor
