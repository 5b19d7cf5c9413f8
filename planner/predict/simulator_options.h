// What a step simulation records and replays (planner/predict/simulator.h).
#pragma once

namespace headroom::planner {

struct SimulatorOptions {
  bool record_events = true;      // keep the timeline (large for big graphs)
  int max_memory_samples = 20000; // the curve is thinned to at most this many points
  // Replay all grad_accum micro-steps instead of the first three and the last
  // (the identical ones between are accounted, not replayed): for tests.
  bool replay_every_micro_step = false;
  // false: the optimizer's states are resident from the start even where it makes
  // them at its first step (ModelStates::states_created_lazily), one step: for tests.
  bool lazy_optimizer_states = true;
};

}  // namespace headroom::planner
