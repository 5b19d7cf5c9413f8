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
#include "executor/zero_layout.h"

namespace headroom::executor {

// The gradients of `bucket`'s parameters, flat at their bucket offsets, in a
// zeroed tensor of `length` >= bucket.elements (ZeRO pads it to a multiple of
// the world size) with `options`; a parameter without a gradient stays zeros.
torch::Tensor bucket_gradients(const ZeroBucket& bucket, const NamedParameters& parameters, int64_t length,
                               const torch::TensorOptions& options);

// Sums every gradient over the ranks in place. A parameter without a gradient
// contributes zeros and stays without one. All trainable parameters share one
// dtype and device.
Status all_reduce_gradients(const NamedParameters& parameters, Communicator& communicator, int64_t bucket_elements);

}  // namespace headroom::executor
