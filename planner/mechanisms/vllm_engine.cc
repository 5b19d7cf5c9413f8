#include "planner/mechanisms/vllm_engine.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "planner/mechanisms/trainability.h"
#include "planner/mechanisms/vllm_text.h"

namespace headroom::planner {
namespace {

// A share of the GPU rounded down to what still passes: vLLM takes ceil(total x u).
double share_below(int64_t bytes, int64_t gpu_bytes) {
  return std::floor(1000.0 * static_cast<double>(bytes) / static_cast<double>(gpu_bytes)) / 1000.0;
}

}  // namespace

int64_t vllm_weight_bytes(const graph::LayerGraph& graph) {
  int64_t bytes = 0;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.buffer || !param.tied_to.empty() || is_lora_adapter(param)) continue;
      bytes += param.elements() * 2;  // the LLM's dtype: the policy's 16-bit weights (GRPO runs bf16)
    }
  }
  return bytes;
}

VllmEngine vllm_engine(const graph::LayerGraph& graph, const RunSettings& settings, int64_t gpu_bytes,
                       int64_t trainer_start_bytes, int64_t kv_bytes_per_token) {
  VllmEngine engine;
  const Generation generation = settings.generation.value_or(Generation::kGenerate);
  engine.colocated = generation == Generation::kVllmColocate || generation == Generation::kVllmColocateSleep;
  if (!engine.colocated) return engine;
  engine.sleeps = generation == Generation::kVllmColocateSleep;
  engine.utilization = settings.vllm_gpu_memory_utilization.value_or(kTrlVllmUtilization);
  // request_memory: math.ceil(total_memory * gpu_memory_utilization).
  engine.share_bytes = static_cast<int64_t>(std::ceil(static_cast<double>(gpu_bytes) * engine.utilization));
  engine.weights_bytes = vllm_weight_bytes(graph);
  // max_model_len: TRL passes vllm_max_model_length, and vLLM takes the model's own
  // maximum positions when it is None.
  engine.max_model_len = settings.vllm_max_model_len.value_or(graph.sequence.max_seq);
  const int64_t blocks = (engine.max_model_len + kVllmBlockTokens - 1) / kVllmBlockTokens + 1;
  engine.kv_needed_bytes = blocks * kVllmBlockTokens * kv_bytes_per_token;
  engine.kv_at_most_bytes = engine.share_bytes - engine.weights_bytes;
  engine.free_at_start_bytes = gpu_bytes - trainer_start_bytes;
  return engine;
}

Status check_vllm_starts(const VllmEngine& engine, int64_t gpu_bytes, int64_t kv_bytes_per_token) {
  if (!engine.colocated) return Status::ok();
  const std::string share = "vllm_gpu_memory_utilization " + vllm_fraction(engine.utilization);
  if (engine.free_at_start_bytes < engine.share_bytes) {
    return Status::invalid_input(
        share + ": vLLM will not start: it requests " + vllm_gib(engine.share_bytes) + " of the GPU's " + vllm_gib(gpu_bytes) +
        " but the trainer's CUDA context and weights leave " + vllm_gib(engine.free_at_start_bytes) +
        " free (vllm/v1/worker/utils.py request_memory); expected a utilization of at most " +
        vllm_fraction(share_below(engine.free_at_start_bytes, gpu_bytes)));
  }
  if (engine.kv_at_most_bytes < engine.kv_needed_bytes) {
    const int64_t tokens = engine.kv_at_most_bytes > 0 ? engine.kv_at_most_bytes / kv_bytes_per_token : 0;
    const double enough = static_cast<double>(engine.weights_bytes + engine.kv_needed_bytes) /
                          static_cast<double>(gpu_bytes);
    return Status::invalid_input(
        share + ": vLLM will not start: its KV cache must hold one max_model_len request of " +
        std::to_string(engine.max_model_len) + " tokens (" + vllm_gib(engine.kv_needed_bytes) + "), but its share " +
        vllm_gib(engine.share_bytes) + " less its weights " + vllm_gib(engine.weights_bytes) + " leaves at most " +
        vllm_gib(std::max<int64_t>(0, engine.kv_at_most_bytes)) + ", " + std::to_string(tokens) +
        " tokens, before its activations and CUDA graphs (vllm/v1/core/kv_cache_utils.py "
        "check_enough_kv_cache_memory); expected vllm_max_model_len at most " + std::to_string(tokens) +
        " or a utilization above " + vllm_fraction(enough));
  }
  return Status::ok();
}

}  // namespace headroom::planner
