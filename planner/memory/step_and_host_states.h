// The last steps of a state walk (state_walk.h): optimizer.step()'s temporaries,
// optimizer-in-backward and when the states are made; the host RAM and NVMe of the
// offloaded states and one checkpoint's bytes. Sources in docs/memory-model.md.
#pragma once

#include "planner/memory/state_walk.h"

namespace headroom::planner {

// optimizer.step()'s temporaries, optimizer-in-backward, and when the states are made.
void add_optimizer_step(StateWalk& w);
// Host RAM and NVMe of the offloaded states, for every rank of a node, and one checkpoint's bytes.
void add_host_and_disk(StateWalk& w);

}  // namespace headroom::planner
