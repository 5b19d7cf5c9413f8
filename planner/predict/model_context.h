// The model context: everything derived once from a run's settings before any
// prediction (the graph with its training mode applied, its analysis, the GPU,
// the sequence length, the compute dtype, a calibration), and the run's own
// decisions as the user launches it. The first stage of the planner
// (model_context -> step_builder -> simulator -> prediction -> plan_search ->
// planner entry points); calls go in that direction only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"
#include "graph/status.h"
#include "planner/time/block_profile.h"
#include "planner/settings/hardware.h"
#include "planner/memory/model_states.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Everything derived once from the settings: the graph with its training mode
// applied, its analysis, the GPU, the sequence length and the compute dtype.
struct ModelContext {
  graph::LayerGraph graph;
  graph::GraphAnalysis analysis;
  GpuSpec gpu;
  int64_t seq_len = 0;
  graph::DType compute_dtype = graph::DType::kBF16;
  TimeModelOptions time_options;                 // defaults, or from a calibration file
  std::optional<int64_t> measured_context_bytes;  // from a calibration file
  // Per block, what a checkpointed block keeps besides its inputs (tensor
  // indices): empty for whole-block recompute, the policy's saves for
  // selective-op (planner/mechanisms/selective_checkpoint.h).
  std::vector<std::vector<int>> checkpoint_saves;
  // Per block, tensors an autograd Function keeps on its ctx outside save_for_backward
  // (bitsandbytes up to 0.43.1: MatMul4Bit's ctx.tensors; mechanisms/bnb_matmul4bit.h):
  // the node lives with the graph, so they stay until the whole backward is done.
  std::vector<std::vector<int>> ctx_held;
  // A Hugging Face model directory: differences between its config-derived graph
  // and its safetensors headers (missing, extra, shape), for the user to see.
  std::vector<std::string> checkpoint_mismatches;
};

// Loads MODEL (zoo name, a Hugging Face model directory or config.json, or a
// layer-graph JSON path), applies the training mode,
// resolves GPU, sequence length (resolution for image models) and budgets.
Result<ModelContext> prepare_context(const RunSettings& settings);

// Bytes a prediction may add up to, with room to spare below 2^63: every size
// is an int64, and sums of them must never wrap.
inline constexpr double kMaxPredictedBytes = 1152921504606846976.0;  // 2^60

// Whether every size of the model at (micro_batch, seq) fits the int64 byte
// arithmetic of a prediction: each tensor evaluates without overflow, and the
// bytes of all tensors (saved, their gradients and a transient copy) and of the
// parameters with gradients and AdamW states, summed in floating point, stay
// under kMaxPredictedBytes. A run outside is refused, never wrapped.
bool sizes_in_range(const ModelContext& context, int64_t micro_batch, int64_t seq);

// `settings` as a plan file keeps them: a model or calibration file given as a
// relative path becomes absolute, so the plan runs from any directory.
RunSettings settings_for_plan(const RunSettings& settings);

// Refuses a micro-batch at which a BatchNorm layer in training mode sees one
// value per channel (torch's "Expected more than 1 value per channel when
// training"): `fit`, plan files and every candidate of the search check it.
Status check_batch_norm_values(const ModelContext& context, int64_t micro_batch);

// The checkpoint decisions the user asked for (none / every block / a list).
Result<std::vector<BlockChoice>> user_block_choices(const ModelContext& context,
                                                    const RunSettings& settings);

// The global choices as the user launches the run.
GlobalConfig user_config(const RunSettings& settings);



// GPU bytes left for the caching allocator: capacity minus the safety margin and
// the CUDA context (outside the allocator).
int64_t gpu_budget_bytes(const ModelContext& context, const RunSettings& settings);
int64_t context_bytes(const ModelContext& context, const RunSettings& settings);
int64_t allocator_budget(const ModelContext& context, const RunSettings& settings);

// What the user should know about the answer's inputs: budgets that were
// assumed rather than given, and a checkpoint that disagrees with its config.
std::vector<std::string> input_warnings(const ModelContext& context, const RunSettings& settings);

}  // namespace headroom::planner
