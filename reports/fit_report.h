// Text and JSON renderings of the planner's answers for `headroom fit` and
// `headroom plan`. Pure functions: they take planner values and return a
// string or a JSON value; they never print and never call the solver. Memory
// is shown in GiB, disk in GB, times in ms (reports/units.h). The JSON forms
// are documented field by field in docs/cli-json.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "planner/settings/hardware.h"
#include "planner/predict/plan.h"
#include "planner/predict/planner.h"

namespace headroom::reports {

// "layers.1-31, head": names of the form <prefix>.<n> with consecutive n and
// the same prefix are merged into one range; other names are listed as they are.
std::string compact_block_list(const std::vector<std::string>& names);

// "checkpoint: layers.1-31 (31 blocks)" or "checkpoint: none" for the blocks
// of `plan` that take `choice`.
std::string block_choice_line(const planner::Plan& plan, planner::BlockChoice choice);

// "ZeRO-2, optimizer offload cpu, parameter offload none, micro-batch 2 x 16
// accumulation steps x 4 GPUs = global batch 128".
std::string globals_line(const planner::GlobalConfig& config, int world_size);

// Time per sample (ms) of a prediction, over the whole job; 0 when unknown.
double sample_ms(const planner::Prediction& prediction);

// "llama-3-8b, bf16-mixed, adamw, full fine-tuning, sequence 2048, 1 GPU".
std::string run_line(const planner::Plan& plan);

// "FITS on NVIDIA RTX A6000 (48.0 GiB): peak 41.2 GiB, 4.1 GiB to spare above
// the 5% safety margin" or "DOES NOT FIT on ...: peak ..., short by X GiB ...".
// Names host RAM or disk when those are what does not fit.
std::string verdict_line(const planner::Prediction& prediction, std::string_view gpu_name,
                         double safety_margin);

// The GPU memory at the peak by category, with the peak allocated and reserved.
std::string breakdown_table(const planner::Prediction& prediction);

// "Peak during backward in layers.3 (block 4 of the chain)".
std::string peak_line(const planner::Prediction& prediction);

// Host RAM and disk, need against budget; the disk line explains the
// checkpoint count (kept + 1 being written).
std::string resources_text(const planner::Prediction& prediction, int checkpoints_kept);

// Step time, its parts, throughput and MFU.
std::string time_text(const planner::Prediction& prediction);

// A plan in a few lines: globals, checkpointed and offloaded blocks, GPU peak
// against the budget, step time and throughput.
std::string plan_summary(const planner::Plan& plan);

// The memory/time frontier, one row per point, ascending memory.
std::string frontier_table(const std::vector<planner::FrontierPoint>& frontier);

// One line per suggestion with its predicted peak, budget and time per sample.
std::string suggestions_text(const std::vector<planner::Suggestion>& suggestions);

// The whole text answer of `headroom fit` and of `headroom plan`.
std::string fit_report(const planner::FitAnswer& answer, std::string_view gpu_name);
std::string plan_report(const planner::PlanResult& result, std::string_view gpu_name);

// JSON pieces and the documents `--json` prints (docs/cli-json.md).
nlohmann::json config_to_json(const planner::GlobalConfig& config);
nlohmann::json frontier_point_to_json(const planner::FrontierPoint& point);
nlohmann::json suggestion_to_json(const planner::Suggestion& suggestion);
nlohmann::json plan_result_to_json(const planner::PlanResult& result);
nlohmann::json fit_to_json(const planner::FitAnswer& answer, const planner::GpuSpec& gpu);
nlohmann::json plan_document_to_json(const planner::PlanResult& result,
                                     const planner::GpuSpec& gpu);

}  // namespace headroom::reports
