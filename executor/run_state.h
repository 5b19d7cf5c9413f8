// run.json, the run's own part of every training-state checkpoint the trainer
// writes (docs/training-checkpoints.md): the step, the identity of the run
// (a checkpoint resumes only the run that wrote it) and the fp16 loss scaler.
// Torch-free, so the reader is tested and fuzzed without LibTorch.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "executor/run.h"
#include "graph/status.h"
#include "planner/predict/plan.h"

namespace headroom::executor {

inline constexpr std::string_view kRunStateFormat = "headroom.run_state";
inline constexpr int kRunStateVersion = 1;

struct RunState {
  int64_t step = 0;
  nlohmann::json identity;  // run_identity() of the run that wrote it
  double loss_scale = 1;    // fp16 dynamic loss scale (1 otherwise)
  int64_t clean_steps = 0;  // steps since the scale last changed
};

// The identity of a run: the plan's model, precision, mode, batch and sequence,
// the options that change the trajectory (learning rate, seed, data), and
// `parameters`, a digest of every module parameter's name, shape and
// trainability: the model a path names can change under it (a config.json
// edited from untied to tied embeddings), and resuming then would silently
// drop or misplace state.
nlohmann::json run_identity(const planner::Plan& plan, const RunOptions& options, const std::string& parameters);

std::string run_state_text(const RunState& state);

// Strict: JSON through parse_json_text (depth limit, duplicate keys, numbers a
// double holds), exactly the keys written, format and version as written,
// step equal to `expected_step` (the checkpoint's directory name), identity
// an object, loss_scale a positive finite number, clean_steps an integer >= 0.
// Errors start with `origin` and name the field.
Result<RunState> parse_run_state(std::string_view text, const std::string& origin, int64_t expected_step);

// Checks that a checkpoint's identity is this run's; the error names `origin`
// and each field that differs, with both values.
Status check_identity(const nlohmann::json& saved, const nlohmann::json& current, const std::string& origin);

}  // namespace headroom::executor
