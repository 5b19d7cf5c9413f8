#include "executor/prediction_check.h"

#include <algorithm>

#include "planner/memory/model_states.h"
#include "planner/predict/prediction.h"

namespace headroom::executor {

double CategoryCheck::relative_error() const {
  if (measured == 0) return predicted == 0 ? 0.0 : 1.0;
  return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

int64_t predicted_host_offload(const planner::Plan& plan) {
  return std::max<int64_t>(0, plan.prediction.host_ram - planner::kHostBytesPerRank * plan.settings.gpus_per_node);
}

void add_category_checks(const planner::Plan& plan, const MeasuredCategories& measured, bool on_cuda,
                         RunResult& result) {
  const planner::MeasurableMemory& predicted = plan.prediction.allocated;
  auto add = [&](const char* name, int64_t predicted_bytes, int64_t measured_bytes) {
    result.categories.push_back(CategoryCheck{name, predicted_bytes, measured_bytes});
  };
  add("parameters", predicted.parameters, measured.parameters);
  if (plan.config.offload_optimizer != planner::Offload::kNone && !on_cuda) {
    result.notes.push_back("optimizer offload on a CPU run: the states are in the same memory as everything "
                           "else, so gradients and optimizer states are not compared");
  } else {
    add("optimizer states + master weights", predicted.optimizer_states + predicted.master_weights,
        measured.optimizer);
    add("gradients", predicted.gradients, measured.gradients);
  }
  add("activations", predicted.activations, measured.activations);
  if (predicted.offloaded_activations > 0) {
    add("offloaded activations", predicted.offloaded_activations, measured.offloaded_activations);
  }
  const int64_t peak = result.measured.steps.front().peak_allocated;
  if (on_cuda) {
    add("peak allocated (step 1)", plan.prediction.peak_allocated, peak);
  } else {
    add("peak allocated less cuBLAS workspace (step 1)",
        plan.prediction.peak_allocated - plan.prediction.peak.workspaces, peak);
    result.notes.push_back("CPU run: CPU kernels' temporaries differ from CUDA's, so the peak is indicative; "
                           "the per-category rows are the check");
  }
}

void add_gathered_check(const planner::Plan& plan, const graph::LayerGraph& graph, int64_t measured_peak_bytes,
                        RunResult& result) {
  const planner::ModelStates states =
      planner::model_states(graph, plan.settings, plan.config, planner::Accounting::kAllocated);
  result.categories.push_back(CategoryCheck{"gathered parameters (ZeRO-3)", states.gathered_params, measured_peak_bytes});
}

std::optional<planner::Calibration> calibrate(const planner::Plan& plan, double matmul_efficiency,
                                              const planner::MeasuredRun& measured,
                                              std::optional<int64_t> outside_allocator_bytes) {
  const double predicted_ms = plan.prediction.time.step_ms;
  if (measured.steps.size() < 2 || predicted_ms <= 0) return std::nullopt;
  const double measured_ms = measured.median_step_ms();
  if (measured_ms <= 0) return std::nullopt;
  planner::Calibration c;
  c.gpu = plan.settings.gpu;
  c.matmul_efficiency = std::clamp(matmul_efficiency * predicted_ms / measured_ms, 0.01, 1.0);
  c.cuda_context_bytes = outside_allocator_bytes;
  c.source = "headroom run on " + measured.device + ", " + measured.driver + ", torch " + measured.torch_version +
             ", " + measured.date;
  return c;
}

}  // namespace headroom::executor
