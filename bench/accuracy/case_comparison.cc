#include "bench/accuracy/case_comparison.h"

#include "planner/predict/planner.h"

namespace headroom::bench {

Result<planner::Prediction> predict_settings(const planner::RunSettings& settings) {
  Result<planner::ModelContext> context = planner::prepare_context(settings);
  if (!context.is_ok()) return context.status();
  Result<std::vector<planner::BlockChoice>> blocks =
      planner::user_block_choices(context.value(), settings);
  if (!blocks.is_ok()) return blocks.status();
  return planner::predict(context.value(), settings, planner::user_config(settings),
                          blocks.value());
}

namespace {

// The predicted counterpart of each published metric. nvidia-smi's "used" is
// the process's reserved pool plus the CUDA context outside it: gpu_total.
void compare_memory(const MeasuredMemory& measured, const planner::Prediction& prediction,
                    CaseOutcome& out) {
  int64_t predicted = 0;
  switch (measured.metric) {
    case MemoryMetric::kAllocated:
    case MemoryMetric::kActive:
      predicted = prediction.peak_allocated;
      out.memory_quantity = "peak allocated";
      break;
    case MemoryMetric::kReserved:
      predicted = prediction.peak_reserved;
      out.memory_quantity = "peak reserved";
      break;
    case MemoryMetric::kNvidiaSmi:
      predicted = prediction.gpu_total;
      out.memory_quantity = "GPU total";
      break;
  }
  out.measured_memory_bytes = measured.bytes_per_gpu;
  out.predicted_memory_bytes = static_cast<double>(predicted);
  // The band is in reserved memory (planner/predict/prediction.cc): reserved and nvidia-smi
  // readings have a bottom, allocated ones do not.
  const int64_t width = prediction.gpu_total - prediction.gpu_total_bottom;
  if (width > 0 && measured.metric != MemoryMetric::kAllocated && measured.metric != MemoryMetric::kActive) {
    out.predicted_memory_bottom_bytes = static_cast<double>(predicted - width);
  }
  out.memory_error =
      (static_cast<double>(predicted) - measured.bytes_per_gpu) / measured.bytes_per_gpu;
}

void compare_time(const MeasuredTime& measured, const planner::Prediction& prediction,
                  int world_size, CaseOutcome& out) {
  const planner::TimeBreakdown& t = prediction.time;
  double predicted = 0;
  switch (measured.kind) {
    case TimeKind::kTokensPerSecondPerGpu:
      // headroom's tokens_per_s is the whole job's.
      predicted = t.tokens_per_s / world_size;
      out.time_unit = "tokens/s/GPU";
      break;
    case TimeKind::kTokensPerSecondJob:
      predicted = t.tokens_per_s;
      out.time_unit = "tokens/s (job)";
      break;
    case TimeKind::kSamplesPerSecondJob:
      predicted = t.samples_per_s;
      out.time_unit = "samples/s";
      break;
    case TimeKind::kStepSeconds:
      predicted = t.step_ms / 1000.0;
      out.time_unit = "s/step";
      break;
  }
  out.measured_time = measured.value;
  out.predicted_time = predicted;
  if (!(predicted > 0)) {
    out.time_not_compared = "headroom predicted no time for this run";
    return;
  }
  // Time per unit of work: throughputs are inverted.
  out.time_error = measured.kind == TimeKind::kStepSeconds ? predicted / measured.value - 1.0
                                                           : measured.value / predicted - 1.0;
}

}  // namespace

CaseOutcome compare_case(const BenchCase& bench_case, const planner::Prediction& prediction) {
  CaseOutcome out;
  out.bench_case = &bench_case;
  out.predicted = true;
  out.simulated_out_of_memory = prediction.simulated_out_of_memory;
  if (bench_case.memory) {
    compare_memory(*bench_case.memory, prediction, out);
  } else {
    out.memory_not_compared = "no memory published";
  }
  if (!bench_case.time) {
    out.time_not_compared = "no step time or throughput published";
  } else if (!bench_case.time_not_comparable.empty()) {
    out.time_not_compared = bench_case.time_not_comparable;
  } else {
    compare_time(*bench_case.time, prediction, bench_case.settings->world_size(), out);
  }
  return out;
}

CaseOutcome unpredicted_case(const BenchCase& bench_case) {
  CaseOutcome out;
  out.bench_case = &bench_case;
  out.memory_not_compared = "not expressible";
  out.time_not_compared = "not expressible";
  return out;
}

}  // namespace headroom::bench
