// The standalone HTML report (`headroom report`): one self-contained file with
// inline CSS and SVG charts, no scripts, viewable offline. Charts (each an
// <svg> with a stable id): chart-breakdown (memory by category against the GPU
// and the budget), chart-memory (allocated/reserved over the step, budget line,
// peak marked, measured curve and per-step peaks overlaid), chart-frontier (memory vs time per
// sample as a step line, chosen plan marked), chart-blocks (keep/checkpoint/
// offload per block, named), chart-timeline (streams of the first micro-step,
// at most 5000 rectangles). Every name is HTML-escaped; curves are thinned to
// the chart's pixels, so size grows with the block count, not the event count.
// docs/report.md.
#pragma once

#include <string>
#include <vector>

#include "planner/predict/planner.h"
#include "planner/predict/simulation.h"
#include "reports/measured_run.h"

namespace headroom::reports {

struct ReportInput {
  const planner::Plan* plan = nullptr;                          // required
  const planner::Simulation* simulation = nullptr;              // memory curve and timeline
  const std::vector<planner::FrontierPoint>* frontier = nullptr;  // points labelled A, B, ... in chart and table
  const planner::Plan* fastest = nullptr;  // the fastest plan in the run's space, beside the file's run
  std::string space;                        // what that search could change, in words
  std::vector<planner::Suggestion> alternatives;  // faster changes beyond the space
  std::vector<std::string> assumptions;     // assumed budgets, uncalibrated speeds, ...
  const MeasuredRun* measurement = nullptr;                     // predicted vs measured
  std::string gpu_name;
  std::string title;         // page title and heading; empty: "headroom report: MODEL on GPU"
  std::string generated_by;  // e.g. "headroom 0.1.0 on 2026-11-22"
};

std::string render_html_report(const ReportInput& input);

}  // namespace headroom::reports
