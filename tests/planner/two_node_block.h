// Test support for the step walk's suites: one block of two nodes with weights, its
// backward points as BackwardGradients gives them.
#pragma once

#include "planner/predict/step_model.h"
#include "planner/time/block_profile.h"

namespace headroom::planner {

// The later node in forward runs backward first, its 100 bytes of gradient made there,
// with 1000 bytes in flight; the earlier makes 300 more with 600 in flight.
inline StepModel two_node_block() {
  StepModel step;
  step.blocks.resize(1);
  BlockProfile& block = step.blocks[0];
  block.on_autograd = true;
  block.keep = 500;
  block.bwd_peak = 1000;
  block.bwd_peak_saved = 500;
  block.bwd_points = {{1000, 500, 0, 100}, {600, 200, 100, 400}};
  block.own_grads = 400;
  step.grads_bwd = {400};
  step.grads_bwd_before = {0};
  return step;
}

}  // namespace headroom::planner
