// A run checked against its plan: the plan's prediction of each memory
// category the run can measure apart (planner::Prediction::allocated), next to
// what the run measured (RunResult::categories, bytes as
// torch.cuda.memory_allocated counts them), and the calibration a GPU run's
// step time gives the time model. Reads the Plan only; torch-free.
#pragma once

#include <cstdint>
#include <optional>

#include "executor/run.h"
#include "graph/layer_graph.h"
#include "planner/time/calibration.h"
#include "planner/predict/measurement.h"
#include "planner/predict/plan.h"

namespace headroom::executor {

// What a fresh run measured on its first step, in bytes.
struct MeasuredCategories {
  int64_t parameters = 0;             // what building the model added
  int64_t optimizer = 0;              // what creating the optimizer added: states + master weights
  int64_t gradients = 0;              // what dropping the gradients after the step freed
  int64_t activations = 0;            // first micro-batch: what its forward left on the device
  int64_t offloaded_activations = 0;  // first micro-batch: what its forward copied to the host
};

// Host RAM the plan's offload takes (optimizer states, activations), in bytes:
// its predicted host RAM beyond the training processes' own.
int64_t predicted_host_offload(const planner::Plan& plan);

// Appends to `result` the rows of a fresh run's first step: each category
// predicted and measured, and the peak allocated over the step (on the CPU
// less the cuBLAS workspace a GPU would hold), with notes on what a CPU run
// cannot compare. result.measured holds the first step.
void add_category_checks(const planner::Plan& plan, const MeasuredCategories& measured, bool on_cuda,
                         RunResult& result);

// ZeRO-3: the row of the gathered parameters, `measured_peak_bytes` (the most
// gathered at once over a step) against the planner's gathered_params for the
// plan (allocated accounting), on `graph` (the plan's model).
void add_gathered_check(const planner::Plan& plan, const graph::LayerGraph& graph, int64_t measured_peak_bytes,
                        RunResult& result);

// A GPU run's calibration: the time model's matmul efficiency (the one the
// plan's step time was predicted with) scaled by predicted / measured median
// step time, and the memory outside the caching allocator. nullopt with fewer
// than 2 steps or no predicted time.
std::optional<planner::Calibration> calibrate(const planner::Plan& plan, double matmul_efficiency,
                                              const planner::MeasuredRun& measured,
                                              std::optional<int64_t> outside_allocator_bytes);

}  // namespace headroom::executor
