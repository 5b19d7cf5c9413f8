// Where one training step's time goes, in milliseconds, as the time model
// (time/step_time.h) and the simulator price it; part of a Prediction
// (predict/plan.h). Its JSON form is prediction_to_json's "time" (docs/cli-json.md).
#pragma once

namespace headroom::planner {

struct TimeBreakdown {
  double forward_ms = 0;
  double backward_ms = 0;
  double recompute_ms = 0;
  double offload_exposed_ms = 0;  // activation copies not hidden behind compute
  double comm_exposed_ms = 0;     // ZeRO collectives not hidden behind backward, and FSDP2 all-gather copy-outs
  double optimizer_ms = 0;        // GPU or CPU optimizer step incl. offload transfers
  double paged_migration_ms = 0;  // of which: paged optimizer states moved in and out of the GPU
  double step_ms = 0;             // one optimizer step: accumulation loop + optimizer
  double samples_per_s = 0;       // whole job (all GPUs)
  double tokens_per_s = 0;
  double mfu = 0;                 // model FLOPs (no recompute) / (time * peak), 0..1
};

}  // namespace headroom::planner
