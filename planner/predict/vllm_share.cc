#include "planner/predict/vllm_share.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "planner/mechanisms/kv_cache.h"
#include "planner/memory/state_bytes.h"
#include "planner/settings/stack.h"
#include "planner/mechanisms/vllm_text.h"

namespace headroom::planner {
namespace {

// One token's K and V over every layer, in the policy's 16-bit dtype (the LLM's).
int64_t kv_bytes_per_token(const ModelContext& context) {
  const Result<std::vector<int64_t>> per_token = kv_cache_elements_per_token(context.graph);
  if (!per_token.is_ok()) return 0;  // refused in prepare_context
  int64_t bytes = 0;
  for (int64_t elements : per_token.value()) bytes += elements * 2;
  return bytes;
}

// What the trainer holds when GRPOTrainer builds the LLM: its CUDA context and the
// policy's weights, which the Trainer has moved to the GPU (optimizer states come at the
// first step).
int64_t trainer_at_start(const ModelContext& context, const RunSettings& settings) {
  int64_t bytes = context_bytes(context, settings);
  for (const graph::Node& node : context.graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.tied_to.empty()) bytes += param_storage_bytes(param, settings.precision);
    }
  }
  return bytes;
}

std::string colocated_note(const VllmEngine& engine, const ModelContext& context, int64_t per_token) {
  const std::string held = engine.sleeps
      ? " is taken for generation only (woken before it, slept at level 2 after it, both weights and KV cache "
        "discarded); its CUDA graphs and activation buffers in torch's allocator stay and are not priced"
      : " is held all step beside the trainer";
  return "vLLM colocated: its share " + vllm_gib(engine.share_bytes) + " (gpu_memory_utilization " +
         vllm_fraction(engine.utilization) + " of the GPU's " + vllm_gib(context.gpu.memory_bytes) + ")" + held +
         "; it holds its own 16-bit weights " + vllm_gib(engine.weights_bytes) + " and a KV cache of at most " +
         vllm_gib(engine.kv_at_most_bytes) + " (" + std::to_string(engine.kv_at_most_bytes / std::max<int64_t>(1, per_token)) +
         " tokens; max_model_len " + std::to_string(engine.max_model_len) + " needs " +
         vllm_gib(engine.kv_needed_bytes) + ")";
}

// The smallest share vLLM could start with: its weights and one max_model_len request.
// The utilization is the user's: the note only says whether it would fit.
std::string lower_share_note(const VllmEngine& engine, const ModelContext& context, const Prediction& p) {
  const double gpu = static_cast<double>(context.gpu.memory_bytes);
  const double smallest = std::ceil(1000.0 * static_cast<double>(engine.weights_bytes + engine.kv_needed_bytes) /
                                    gpu) / 1000.0;
  if (p.fits_gpu || smallest >= engine.utilization) return "";
  const int64_t freed = engine.share_bytes - static_cast<int64_t>(std::ceil(gpu * smallest));
  const bool held_at_peak = !engine.sleeps || p.where.phase == "generation";
  if (!held_at_peak || p.gpu_total - freed > p.gpu_budget) return "";
  return "a vllm_gpu_memory_utilization of " + vllm_fraction(smallest) + " (the least whose KV cache could hold one " +
         "max_model_len request beside vLLM's weights, before its activations and CUDA graphs) would leave the "
         "trainer " + vllm_gib(freed) + " more, enough for this peak";
}

}  // namespace

VllmEngine vllm_engine_of(const ModelContext& context, const RunSettings& settings) {
  if (resolve_stack(settings).top.recipe != Recipe::kGrpo) return VllmEngine{};
  return vllm_engine(context.graph, settings, context.gpu.memory_bytes, trainer_at_start(context, settings),
                     kv_bytes_per_token(context));
}

Status check_vllm_engine(const ModelContext& context, const RunSettings& settings) {
  const VllmEngine engine = vllm_engine_of(context, settings);
  return check_vllm_starts(engine, context.gpu.memory_bytes, kv_bytes_per_token(context));
}

std::vector<std::string> vllm_notes(const ModelContext& context, const RunSettings& settings,
                                    const Prediction& prediction) {
  std::vector<std::string> notes;
  const StackSpec spec = resolve_stack(settings).top;
  if (spec.recipe != Recipe::kGrpo || spec.generation == Generation::kGenerate) return notes;
  if (spec.generation == Generation::kVllmServer) {
    notes.push_back("vLLM server mode: the completions come from a `trl vllm-serve` process on GPUs of its own, "
                    "not priced here; they hold its 16-bit weights (" + vllm_gib(vllm_weight_bytes(context.graph)) +
                    ") and a KV cache within its own --gpu-memory-utilization");
    return notes;
  }
  const VllmEngine engine = vllm_engine_of(context, settings);
  notes.push_back(colocated_note(engine, context, kv_bytes_per_token(context)));
  if (std::string lower = lower_share_note(engine, context, prediction); !lower.empty()) notes.push_back(lower);
  return notes;
}

}  // namespace headroom::planner
