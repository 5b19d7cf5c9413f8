// Shared by the optimizer tests (sgd_test.cc, adafactor_test.cc,
// adamw8bit_test.cc): parameters with gradients set by hand, the planner's
// count of an optimizer's bytes for them, and tiny-llama runs through
// train_plan() with the loss, the measured optimizer bytes and an exact resume.
#pragma once

#include <doctest/doctest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "executor/optimizer.h"
#include "executor/run.h"
#include "executor/state_store.h"
#include "planner/memory/model_states.h"
#include "planner/predict/planner.h"

// c10/util/logging defines CHECK (an abort); the tests mean doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace headroom::executor::optimizer_test {

// Leaf tensors of `shapes` in `dtype`, values from `seed`, named p0, p1, ...
inline NamedParameters make_parameters(const std::vector<std::vector<int64_t>>& shapes, torch::ScalarType dtype,
                                       uint64_t seed) {
  torch::manual_seed(seed);
  NamedParameters out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    out.emplace_back("p" + std::to_string(i), torch::randn(shapes[i]).to(dtype).requires_grad_(true));
  }
  return out;
}

// Gradients of step `step`, a deterministic function of (seed, step); a
// parameter listed in `skip` gets none this step.
inline void set_gradients(const NamedParameters& parameters, int step, uint64_t seed,
                          const std::vector<size_t>& skip = {}) {
  torch::manual_seed(seed * 1000 + static_cast<uint64_t>(step));
  for (size_t i = 0; i < parameters.size(); ++i) {
    const torch::Tensor& p = parameters[i].second;
    torch::Tensor g = torch::randn(p.sizes()).to(p.scalar_type());
    const bool skipped = std::find(skip.begin(), skip.end(), i) != skip.end();
    const_cast<torch::Tensor&>(p).mutable_grad() = skipped ? torch::Tensor() : g;
  }
}

inline NamedParameters clone_parameters(const NamedParameters& parameters) {
  NamedParameters out;
  for (const auto& [name, p] : parameters) out.emplace_back(name, p.detach().clone().requires_grad_(true));
  return out;
}

// The planner's `optimizer + master` for these parameters, unrounded
// (planner/memory/model_states.cc without the allocator's 512-byte rounding).
inline int64_t planner_bytes(planner::OptimizerKind kind, planner::Precision precision,
                             const NamedParameters& parameters) {
  int64_t bytes = 0;
  for (const auto& [name, p] : parameters) {
    const std::vector<int64_t> shape(p.sizes().begin(), p.sizes().end());
    bytes += planner::optimizer_state_bytes(kind, precision, shape) +
             p.numel() * planner::master_bytes_per_element(precision);
  }
  return bytes;
}

inline planner::Plan tiny_llama_plan(planner::OptimizerKind kind, planner::Precision precision) {
  planner::RunSettings settings;
  settings.model = "tiny-llama";
  settings.gpu = "a6000";
  settings.precision = precision;
  settings.optimizer = kind;
  settings.micro_batch = 4;
  Result<planner::FitAnswer> answer = planner::fit(settings);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  return answer->as_given;
}

struct Recorder final : RunObserver {
  std::vector<StepMetrics> steps;
  Status on_step(const StepMetrics& m) override {
    steps.push_back(m);
    return Status::ok();
  }
};

inline std::string temp_dir(const std::string& name) {
  const std::string dir = "/tmp/headroom_optimizer_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

inline const CategoryCheck* find_category(const RunResult& r, const std::string& name) {
  for (const CategoryCheck& c : r.categories) {
    if (c.category == name) return &c;
  }
  return nullptr;
}

inline std::string saved_part(const std::string& dir, const std::string& part) {
  StateStoreOptions options;
  options.directory = dir;
  auto loaded = StateStore(options).load_latest();
  REQUIRE(loaded.is_ok());
  REQUIRE(loaded->has_value());
  return loaded.value()->parts.at(part);
}

// Every tensor of two serialized archives, by key.
inline void check_same_tensors(const std::string& a_bytes, const std::string& b_bytes, const std::string& what) {
  torch::serialize::InputArchive a;
  torch::serialize::InputArchive b;
  a.load_from(a_bytes.data(), a_bytes.size());
  b.load_from(b_bytes.data(), b_bytes.size());
  const std::vector<std::string> keys = a.keys();
  CHECK_MESSAGE(keys == b.keys(), what);
  for (const std::string& key : keys) {
    torch::Tensor x;
    torch::Tensor y;
    a.read(key, x);
    if (!b.try_read(key, y)) continue;  // reported by the key comparison above
    CHECK_MESSAGE(torch::equal(x, y), what << " " << key);
  }
}

// `steps` steps of `plan` on the CPU, checkpointed every `steps / 2`; then the
// same run stopped at the half and resumed from its checkpoint must give the
// same losses and the same model and optimizer bytes. Returns the straight run.
inline RunResult run_and_resume(const planner::Plan& plan, double learning_rate, int64_t steps,
                                const std::string& name, Recorder& straight_steps) {
  RunOptions base;
  base.device = "cpu";
  base.learning_rate = learning_rate;
  base.steps = steps;
  base.checkpoint_every = steps / 2;
  RunOptions straight = base;
  straight.checkpoint_dir = temp_dir(name + "_straight");
  Result<RunResult> full = train_plan(plan, straight, straight_steps);
  REQUIRE_MESSAGE(full.is_ok(), full.message());

  RunOptions half = base;
  half.steps = steps / 2;
  half.checkpoint_dir = temp_dir(name + "_half");
  Recorder first;
  Result<RunResult> stopped = train_plan(plan, half, first);
  REQUIRE_MESSAGE(stopped.is_ok(), stopped.message());
  RunOptions resumed = base;
  resumed.resume_dir = half.checkpoint_dir;
  Recorder rest;
  Result<RunResult> second = train_plan(plan, resumed, rest);
  REQUIRE_MESSAGE(second.is_ok(), second.message());
  REQUIRE(rest.steps.size() == static_cast<size_t>(steps - steps / 2));
  for (size_t i = 0; i < rest.steps.size(); ++i) {
    INFO("step " << rest.steps[i].step);
    CHECK(rest.steps[i].loss == straight_steps.steps[steps / 2 + i].loss);
  }
  for (const char* part : {"model.pt", "optimizer.pt"}) {
    check_same_tensors(saved_part(straight.checkpoint_dir, part), saved_part(half.checkpoint_dir, part), part);
  }
  std::filesystem::remove_all(straight.checkpoint_dir);
  std::filesystem::remove_all(half.checkpoint_dir);
  return full.value();
}

}  // namespace headroom::executor::optimizer_test
