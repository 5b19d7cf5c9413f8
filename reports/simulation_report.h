// Terminal summary of a simulated step (`headroom simulate`): peaks, where the
// reserved peak happens and what is live then, fragmentation, out-of-memory,
// and the step time breakdown. Pure text; the front end prints it.
#pragma once

#include <string>

#include "planner/predict/plan.h"
#include "planner/predict/simulation.h"

namespace headroom::reports {

std::string simulation_summary(const planner::Plan& plan, const planner::Simulation& simulation,
                               const std::string& gpu_name);

}  // namespace headroom::reports
