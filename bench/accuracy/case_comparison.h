// One case against headroom: the prediction for its translated settings, the
// predicted quantity that matches the published metric, and the signed errors.
// Errors are fractions: (predicted - measured) / measured. For time the
// quantity is time per unit of work (a throughput is inverted first), so a
// positive time error means headroom predicts a slower run.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/accuracy/accuracy_inputs.h"
#include "graph/status.h"
#include "planner/predict/plan.h"

namespace headroom::bench {

struct CaseOutcome {
  const BenchCase* bench_case = nullptr;
  bool predicted = false;

  std::optional<double> measured_memory_bytes;   // per GPU
  std::optional<double> predicted_memory_bytes;  // the matching predicted quantity, per GPU
  std::optional<double> memory_error;
  // The band's bottom in the same quantity, where the prediction has a band
  // (batches of varied length grow the reserved cache: RunSettings::shortest_sample).
  std::optional<double> predicted_memory_bottom_bytes;
  std::string memory_quantity;           // "peak allocated", "peak reserved", "GPU total"
  std::string memory_not_compared;       // why, when not compared
  bool simulated_out_of_memory = false;  // the allocator simulation ran out within the budget

  std::optional<double> measured_time;  // in time_unit
  std::optional<double> predicted_time;
  std::optional<double> time_error;
  std::string time_unit;  // "tokens/s/GPU", "samples/s", "s/step"
  std::string time_not_compared;
};

// Runs the planner as `headroom fit` predicts a run as given (prepare_context,
// user_block_choices, user_config, predict with the allocator simulation).
Result<planner::Prediction> predict_settings(const planner::RunSettings& settings);

// The outcome of a case headroom predicted.
CaseOutcome compare_case(const BenchCase& bench_case, const planner::Prediction& prediction);

// The outcome of a case that is not expressible: listed, never predicted.
CaseOutcome unpredicted_case(const BenchCase& bench_case);

}  // namespace headroom::bench
