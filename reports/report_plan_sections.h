// The sections of the HTML report that say what to do (issue 36): the run in the
// plan file beside the fastest plan in its space, the band and every
// assumption, the flags and files that apply the plan, and the frontier's
// points labelled A, B, ... as the chart labels them. HTML fragments, every
// name escaped; report_html.cc places them.
#pragma once

#include <string>
#include <vector>

#include "planner/predict/planner.h"

namespace headroom::reports {

// One table row of cells, escaped (header cells with `header`).
std::string html_row(const std::vector<std::string>& cells, bool header = false);

// "Band: X to Y; open: ..." when the stack leaves mechanisms open; empty otherwise.
std::string band_paragraph(const planner::Prediction& prediction);

// The file's run and `fastest` (null: none found) side by side: verdict,
// memory, host RAM, disk, time, ZeRO, offloads, batch, blocks; then the space
// searched and the faster changes beyond it.
std::string comparison_section(const planner::Plan& run, const planner::Plan* fastest, const std::string& space,
                               const std::vector<planner::Suggestion>& alternatives);

// Every assumption the answer rests on (assumed budgets, uncalibrated speeds,
// open mechanisms), as a list.
std::string assumptions_section(const std::vector<std::string>& assumptions, const planner::Prediction& prediction);

// The flags that give `plan` to fit/plan/run, and its DeepSpeed config and torch
// wrappers (what --emit writes), in collapsed blocks.
std::string apply_section(const planner::Plan& plan);

// headroom's flags for `plan`'s globals and block choices.
std::string plan_flags(const planner::Plan& plan);

// "A", "B", ..., "Z", "AA", ...: the label of the frontier's i-th point.
std::string point_label(size_t index);

// The frontier's points by label: memory, time per sample and configuration.
std::string frontier_points_table(const std::vector<planner::FrontierPoint>& frontier);

}  // namespace headroom::reports
