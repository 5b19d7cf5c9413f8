#include "planner/predict/grpo_phases.h"

#include <algorithm>

#include "planner/mechanisms/kv_cache.h"
#include "planner/mechanisms/trl_fused_head.h"
#include "planner/settings/grpo_settings.h"
#include "planner/predict/vllm_share.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

struct Sizes {
  int64_t rows = 0;        // completions a generation samples
  int64_t prompt = 0;      // prompt tokens
  int64_t longest = 0;     // the cache's last length: prompt + completion - 1
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t width = 2;       // bytes of the compute dtype
};

// The cache's bytes at `tokens`, each tensor rounded as the allocator holds it.
int64_t cache_bytes(const std::vector<int64_t>& per_token, const Sizes& z, int64_t tokens, Accounting accounting) {
  int64_t bytes = 0;
  for (int64_t elements : per_token) bytes += account(z.rows * tokens * elements * z.width, accounting);
  return bytes;
}

// The decode loop's last step: the cache at its longest, one layer's old K or V beside
// its new one (DynamicLayer.update's torch.cat), or the new step's logits, and the
// previous step's fp32 logits copy and softmax.
int64_t decode_peak(const std::vector<int64_t>& per_token, const Sizes& z, Accounting accounting) {
  int64_t old_copy = 0;
  for (int64_t elements : per_token) {
    old_copy = std::max(old_copy, account(z.rows * (z.longest - 1) * elements * z.width, accounting));
  }
  const int64_t logits = account(z.rows * z.vocab * z.width, accounting);
  const int64_t fp32_logits = account(z.rows * z.vocab * 4, accounting);
  return cache_bytes(per_token, z, z.longest, accounting) + std::max(old_copy, logits) + 2 * fp32_logits;
}

// The prefill: the cache at the prompt's length and the largest decoder layer's
// no-grad forward over the prompts, beside the embeddings the model's forward holds
// (inputs_embeds); or the last position's logits (generate passes logits_to_keep=1)
// and their fp32 copy, beside the final hidden states.
int64_t prefill_peak(const ModelContext& context, const std::vector<int64_t>& per_token, const Sizes& z,
                     Accounting accounting) {
  const StepProfile prompts = profile_step(context.graph, context.analysis, context.compute_dtype, z.rows, z.prompt,
                                           accounting, context.gpu, context.time_options, context.checkpoint_saves,
                                           z.width);
  int64_t layer = 0;
  for (size_t b = 0; b < prompts.blocks.size(); ++b) {
    if (context.graph.blocks[b].checkpointable) layer = std::max(layer, prompts.blocks[b].fwd_peak_nograd);
  }
  const int64_t hidden = account(z.rows * z.prompt * z.hidden * z.width, accounting);
  const int64_t head = hidden + account(z.rows * z.vocab * z.width, accounting) +
                       account(z.rows * z.vocab * 4, accounting);
  return cache_bytes(per_token, z, z.prompt, accounting) + std::max(layer + hidden, head);
}

// The head's [vocabulary, hidden] weight: the fused head's parameter.
void head_shape(const graph::LayerGraph& graph, Sizes& z) {
  for (const graph::Node& node : graph.nodes) {
    if (node.op != kTrlFusedLogprobOp || node.params.empty() || node.params.front().shape.size() != 2) continue;
    z.vocab = node.params.front().shape[0];
    z.hidden = node.params.front().shape[1];
  }
}

// vLLM generates (mechanisms/vllm_engine.h): its share, colocated, in place of generate's
// cache and logits on the trainer.
void vllm_generation(const ModelContext& context, const RunSettings& settings, GrpoPhases& out) {
  const VllmEngine engine = vllm_engine_of(context, settings);
  out.generation_at = "vLLM";
  if (!engine.colocated) return;
  if (engine.sleeps) {
    out.vllm_generation = out.generation = engine.share_bytes;
  } else {
    out.vllm_resident = engine.share_bytes;
  }
}

}  // namespace

GrpoPhases grpo_phases(const ModelContext& context, const RunSettings& settings, const StepProfile& training,
                       Accounting accounting) {
  GrpoPhases out;
  const StackSpec spec = resolve_stack(settings).top;
  if (spec.recipe != Recipe::kGrpo) return out;
  // The reference's and the old policy's no-grad log-prob passes (settings/grpo_settings.h
  // grpo_old_logprob_pass): each block at its no-grad peak.
  if (spec.reference != Reference::kNone ||
      grpo_old_logprob_pass(settings, spec.generation != Generation::kGenerate)) {
    for (const BlockProfile& block : training.blocks) out.logprob_pass = std::max(out.logprob_pass, block.fwd_peak_nograd);
  }
  if (spec.generation != Generation::kGenerate) {
    vllm_generation(context, settings, out);
    return out;
  }
  const Result<std::vector<int64_t>> per_token = kv_cache_elements_per_token(context.graph);
  if (!per_token.is_ok()) return out;  // refused in prepare_context
  Sizes z;
  z.rows = grpo_generation_rows(settings);
  z.longest = context.seq_len - 1;
  z.prompt = context.seq_len - grpo_completion_tokens(settings);
  z.width = graph::dtype_bytes(context.compute_dtype, 1);
  head_shape(context.graph, z);
  out.kv_cache = cache_bytes(per_token.value(), z, z.longest, accounting);
  const int64_t decode = decode_peak(per_token.value(), z, accounting);
  const int64_t prefill = prefill_peak(context, per_token.value(), z, accounting);
  out.generation = std::max(decode, prefill);
  out.generation_at = decode >= prefill ? "decode" : "prefill";
  return out;
}

}  // namespace headroom::planner
