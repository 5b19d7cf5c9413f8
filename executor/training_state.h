// A run's training state and its checkpoints (docs/training-checkpoints.md):
// what one checkpoint holds (run.json, model.pt, optimizer.pt, rng.pt; with a
// partitioned optimizer each rank's partition instead, executor/sharded_checkpoint.h),
// the room its directory needs before the first step, and resuming the newest
// one into the model, the optimizer, the RNG streams and the fp16 loss scaler.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "executor/optimizer.h"
#include "executor/run.h"
#include "executor/state_store.h"
#include "executor/train_model.h"
#include "executor/zero3_parameters.h"
#include "graph/status.h"
#include "planner/predict/plan.h"

namespace headroom::executor {

class Communicator;  // executor/communicator.h

// fp16 dynamic loss scaling with torch.amp.GradScaler's defaults: start at
// 2^16, halve on inf/NaN gradients (skipping the step), double after 2000
// clean steps.
struct LossScaler {
  bool enabled = false;
  double scale = 65536.0;
  int64_t clean_steps = 0;
  void update(bool finite);
};

// What a checkpoint saves and a resume restores; references into the trainer.
struct TrainingState {
  TrainModel& model;
  Optimizer& optimizer;
  LossScaler& scaler;
  torch::Device device;  // whose RNG stream is saved with the CPU's
  Zero3Parameters* zero3 = nullptr;  // ZeRO-3: the parameters are partitioned
  int rank = 0;
  int world = 1;
};

// The run's identity (run_state.h) for `model`: part of every checkpoint, so
// that a checkpoint never resumes into another run or a model that changed.
nlohmann::json training_identity(const planner::Plan& plan, const RunOptions& options, TrainModel& model);

// The parts of the checkpoint of `step` this rank writes. A partitioned
// optimizer (ZeRO): every rank its partition ("optimizer.rank-R-of-N.pt", and
// "model.rank-R-of-N.pt" at stage 3), rank 0 also run.json, rng.pt and, below
// stage 3, model.pt; they go through StateStore's shared save. Otherwise rank
// 0 writes every part whole (StateStore::save) and the other ranks none.
std::map<std::string, std::string> checkpoint_parts(int64_t step, const nlohmann::json& identity,
                                                    const TrainingState& state);
// The kinds of rank part every rank writes ("model", "optimizer"); none
// without a partitioned optimizer.
std::vector<std::string> rank_part_kinds(const TrainingState& state);

// A rank's local status made the job's (a collective): an error on any rank
// is an error on every rank, naming `what`.
using AgreeOnStatus = std::function<Status(const Status& local, const std::string& what)>;

// The checkpoint of `step` of a partitioned optimizer, written by every rank of
// the job together (StateStore's shared save): rank 0 checks the room for
// every rank's `parts` and makes the temporary directory, every rank writes
// its parts into it, and rank 0 writes the MANIFEST of them all last, with
// each part's size and checksum, and renames it into place. A failure on any
// rank ends the save on every rank; rank 0 removes what was written.
Status save_sharded_checkpoint(int64_t step, const std::map<std::string, std::string>& parts,
                               const TrainingState& state, StateStore& store, Communicator& comm,
                               const AgreeOnStatus& agree);

// The ranks of a job settle on one checkpoint: each proposes the newest that
// verifies for it (-1: none) and gets every rank's proposal (a collective), so
// that all of them decide alike. One process: its own proposal.
using AgreeOnStep = std::function<Result<std::vector<int64_t>>(int64_t proposed)>;

struct Resumed {
  int64_t step = 0;                  // optimizer steps the checkpoint had done
  std::string path;                  // its directory
  std::vector<std::string> skipped;  // damaged newer checkpoints passed over, with why
};

// Restores `state` from the newest checkpoint in `directory` that verifies on
// every rank. A rank reads the parts every rank holds and its own partition
// when the checkpoint was written by as many ranks; any other checkpoint of a
// partitioned optimizer is re-partitioned from every rank's part. Errors name
// the checkpoint: none there, a part missing, another run's identity.
// LibTorch failures while reading parts throw (train_plan turns them into errors).
Result<Resumed> resume_training(const std::string& directory, FileSystem& file_system,
                                const nlohmann::json& identity, const TrainingState& state,
                                const AgreeOnStep& agree);

// Before the first step, not at the first save hours later: refuses a disk
// that cannot hold the checkpoints kept plus the one being written, each of
// `checkpoint_bytes`, naming `options.checkpoint_dir` and what to do.
Status check_checkpoint_room(const StateStore& store, FileSystem& file_system, const RunOptions& options,
                             int64_t checkpoint_bytes);

// "DIR/step-00000042": where `store` writes the checkpoint of `step`.
std::string checkpoint_path(const std::string& directory, int64_t step);

}  // namespace headroom::executor
