// What the tests that train a plan on the CPU check after the run (trainer_test.cc,
// moe_test.cc): every step's metrics as the trainer reports them, and the bar,
// each memory category measured and within 5% of the prediction.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "executor/run.h"

namespace headroom::executor::run_test {

struct StepRecorder final : RunObserver {
  std::vector<StepMetrics> steps;
  Status on_step(const StepMetrics& m) override {
    steps.push_back(m);
    return Status::ok();
  }
};

inline void check_categories(const RunResult& r, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const CategoryCheck* found = nullptr;
    for (const CategoryCheck& c : r.categories) found = c.category == name ? &c : found;
    REQUIRE_MESSAGE(found != nullptr, name);
    INFO(name << ": predicted " << found->predicted << " measured " << found->measured);
    DOCTEST_CHECK(found->measured > 0);
    DOCTEST_CHECK(std::abs(found->relative_error()) <= 0.05);
  }
}

}  // namespace headroom::executor::run_test
