// `headroom run`: train with a Plan through LibTorch and measure what the
// planner predicted. This header is torch-free so the front end can include it
// in every build; train_plan() itself exists only when LibTorch was found
// (HEADROOM_HAVE_EXECUTOR), and check_executable() always does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/status.h"
#include "planner/time/calibration.h"
#include "planner/predict/measurement.h"
#include "planner/predict/plan.h"

namespace headroom::executor {

class FileSystem;  // executor/state_store.h

struct RunOptions {
  int64_t steps = 20;             // optimizer steps to reach (a resumed run continues to this step)
  std::string data = "synthetic";  // "synthetic" or a token file (docs/executor.md, "Data")
  int token_bytes = 4;             // token file: 2 (uint16) or 4 (uint32), little-endian
  double learning_rate = 1e-3;
  double weight_decay = 0.0;
  uint64_t seed = 0;
  std::string device = "auto";  // auto (CUDA when available), cpu, cuda
  int cpu_threads = 0;          // CPU optimizer threads, 0 = all cores

  std::string checkpoint_dir;     // training-state checkpoints; empty = none
  int64_t checkpoint_every = 0;   // steps between checkpoints; 0 = only at the end
  int checkpoints_kept = 2;
  std::string resume_dir;         // continue from the newest checkpoint there (and save there by default)
  FileSystem* file_system = nullptr;  // checkpoint I/O; null = the real one (tests inject faults)
  int64_t host_bytes_available = 0;   // host memory the run may use; 0 = what the system has (tests set it)
  // Seconds a collective waits for a silent peer before it fails (Gloo's and
  // NCCL's process-group timeout): how long a hung rank holds the job.
  int comm_timeout_s = 60;
};

// One optimizer step as measured.
struct StepMetrics {
  int64_t step = 0;           // 1-based
  int64_t total_steps = 0;
  double loss = 0;            // mean over the micro-batches of the step
  double step_ms = 0;         // wall time (CUDA: synchronised)
  double tokens_per_s = 0;
  int64_t peak_allocated = 0;  // bytes over this step (CUDA caching allocator, or the CPU tracker)
  int64_t peak_reserved = 0;
  double loss_scale = 1;       // fp16 dynamic loss scale after the step
  bool skipped = false;        // fp16: non-finite gradients, step skipped
  // A job of several ranks: each rank's peaks over this step, by rank (the
  // fields above are rank 0's). Empty for one process.
  struct RankPeaks {
    int64_t peak_allocated = 0;
    int64_t peak_reserved = 0;
  };
  std::vector<RankPeaks> ranks;
};

// Predicted vs measured bytes of one memory category.
struct CategoryCheck {
  std::string category;  // "parameters", "gradients", "optimizer states", "activations", ...
  int64_t predicted = 0;
  int64_t measured = 0;
  int rank = -1;  // a job of several ranks: the rank measured (the one furthest from the prediction)
  double relative_error() const;  // (predicted - measured) / measured; 0 when both are 0
};

struct RunResult {
  planner::MeasuredRun measured;
  std::vector<CategoryCheck> categories;
  int64_t first_step = 0;  // the first step this process ran (> 1 after --resume)
  int64_t last_step = 0;
  std::string resumed_from;                         // checkpoint directory, when resumed
  std::vector<std::string> checkpoints_written;     // directories
  std::optional<planner::Calibration> calibration;  // CUDA runs only
  std::vector<std::string> notes;                   // what the run could not apply or measure
  int rank = 0;        // this process's rank in the job
  int world_size = 1;  // ranks in the job
};

// Receives progress while train_plan() trains; the front end renders it.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_start(const std::string& /*device*/, int64_t /*first_step*/, int64_t /*total_steps*/) {}
  // An error (the metrics file cannot be written) stops the run with that message.
  virtual Status on_step(const StepMetrics& /*metrics*/) { return Status::ok(); }
  virtual void on_checkpoint(int64_t /*step*/, const std::string& /*path*/) {}
};

// The plan as the executor runs it. Its modules are transformers' as of 4.54: SDPA
// on grouped K/V (enable_gqa, models/torch/llama_module.cc) and the loss without an
// fp32 shifted copy. What the run leaves open there (repeat_kv, a loss the release
// decides) is pinned to that; what the plan states stands, and check_executable
// refuses what the executor does not run.
planner::Plan as_executor_runs(planner::Plan plan);

// Why this build cannot train `plan` (as_executor_runs runs it), or ok: the model family has LibTorch
// modules (the families of executable_model.h), one rank or several (data
// parallel, ZeRO-1/2 with AdamW), no parameter or NVMe offload, no ZeRO-3.
// `origin` names the plan file.
Status check_executable(const planner::Plan& plan, std::string_view origin);

// Validates options; `origin` names where they came from ("command line").
Status validate_run_options(const RunOptions& options, std::string_view origin);

// True when this build has the LibTorch executor.
bool executor_available();

// True when the executor sees a CUDA device (false without LibTorch).
bool cuda_available();

// Trains `plan` for options.steps optimizer steps and measures memory and time
// against the plan's prediction. Errors (bad data file, failed checkpoint save,
// LibTorch failures) come back as a Status; checkpoints already written stay.
Result<RunResult> train_plan(const planner::Plan& plan, const RunOptions& options, RunObserver& observer);

}  // namespace headroom::executor
