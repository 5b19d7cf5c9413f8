// The measured run that reports overlay on predictions: the type lives in
// planner/predict/measurement.h so that the executor, which writes it, shares it.
#pragma once

#include "planner/predict/measurement.h"

namespace headroom::reports {

using planner::load_measured_run;
using planner::MeasuredRun;
using planner::MeasuredSample;
using planner::MeasuredStep;
using planner::measured_run_from_json;
using planner::measured_run_to_json;

}  // namespace headroom::reports
