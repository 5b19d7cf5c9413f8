// Test support for the planner suites: the prediction of a run exactly as given
// (its own checkpointing and globals, no search), as `headroom fit` makes it.
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "planner/planner.h"

namespace headroom::planner {

inline Prediction predict_as_given(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  Result<std::vector<BlockChoice>> choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  return predict(context.value(), settings, user_config(settings), choices.value());
}

}  // namespace headroom::planner
