// DeepSpeed's reduce buckets as DeepSpeed 0.19.8 makes them (docs/memory-model.md,
// "ZeRO buffers"): reduce_bucket_size elements of 16-bit gradients whatever the
// model's size. Stage 3's one lives all run (ModelStates::comm_buckets); stages 1/2
// make theirs at the first gradient hook and free them at the end of backward,
// which the step walk and the simulator price from this function.
#pragma once

#include <cstdint>

#include "planner/memory/state_bytes.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// One reduce bucket's bytes on the GPU, 0 where the run has none (plain data
// parallelism, torch's FSDPs).
int64_t deepspeed_reduce_bucket_bytes(const RunSettings& settings, const GlobalConfig& config,
                                      Accounting accounting);

// ZeRO-1/2's reduce buckets, live in backward only: two under overlap_comm, else one.
// 0 at stage 3 and where the run has no bucket.
int64_t deepspeed_backward_bucket_bytes(const RunSettings& settings, const GlobalConfig& config,
                                        Accounting accounting);

}  // namespace headroom::planner
