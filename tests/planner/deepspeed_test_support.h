// Test support for the DeepSpeed suites (deepspeed_buckets_test.cc,
// deepspeed_labels_test.cc): a Trainer run under DeepSpeed's ZeRO at a stage, and
// its step built over a hand-made graph with no block profile.
#pragma once

#include <cstdint>

#include "planner/predict/model_context.h"
#include "planner/predict/step_builder.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {

inline constexpr int64_t kDeepSpeedBucketBytes = 500'000'000 * 2;  // reduce_bucket_size's default, bf16

// The Trainer with DeepSpeed at ZeRO `stage` on two GPUs, pure bf16.
inline RunSettings deepspeed(int stage) {
  RunSettings settings;
  settings.stack = Stack::kHfTrainer;
  settings.precision = Precision::kBf16Pure;
  settings.gpus_per_node = 2;
  settings.zero_stage = stage;
  return settings;
}

// The step of `settings` over `graph` (allocated accounting, no cuBLAS workspace).
inline BuiltStep built(const graph::LayerGraph& graph, const RunSettings& settings) {
  ModelContext context;
  context.graph = graph;
  context.gpu.cublas_workspace_bytes = 0;
  StepProfile profile;
  profile.blocks.resize(context.graph.blocks.size());
  return build_step(context, settings, zero_stage(settings.zero_stage), profile, Accounting::kAllocated);
}

}  // namespace headroom::planner
