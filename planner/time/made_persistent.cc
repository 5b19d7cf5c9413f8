#include "planner/time/made_persistent.h"
#include "planner/time/made_persistent_tensors.h"

#include <algorithm>

#include "planner/mechanisms/loss_variants.h"
#include "planner/settings/stack_traits.h"

namespace headroom::planner {

std::vector<int> made_persistent_tensors(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis) {
  std::vector<int> out;
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    const int producer = analysis.producer[t];
    if (!analysis.persistent[t] || producer < 0 || held_by_caller(graph.tensors[t])) continue;
    // A leaf that requires grad stays all step: its AccumulateGrad node holds it to the
    // backward's end (torch 2.11 torch/csrc/autograd/functions/accumulate_grad.h,
    // `Variable variable`). One that requires grad through its producer is held by its
    // readers' saves and checkpoint frames only, as one made without grad: T5's encoder
    // output, which the decoder layers' k and v (or their checkpoints) keep, and nothing
    // once the decoder's first layer has run backward (transformers 5.23.0
    // models/t5/modeling_t5.py; the oracle's Flan-T5 rows under checkpointing).
    if (graph.tensors[t].requires_grad) continue;
    out.push_back(static_cast<int>(t));
  }
  return out;
}

std::vector<MadePersistent> made_persistent(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                            const std::vector<int64_t>& bytes) {
  std::vector<MadePersistent> out;
  for (int t : made_persistent_tensors(graph, analysis)) {
    const int producer = analysis.producer[static_cast<size_t>(t)];
    MadePersistent made;
    made.bytes = bytes[static_cast<size_t>(t)];
    made.producer_block = graph.nodes[static_cast<size_t>(producer)].block;
    made.first_reader = made.last_reader = made.producer_block;
    bool read = false;
    for (int consumer : analysis.consumers[t]) {
      const int block = graph.nodes[static_cast<size_t>(consumer)].block;
      made.first_reader = read ? std::min(made.first_reader, block) : block;
      made.last_reader = read ? std::max(made.last_reader, block) : block;
      read = true;
    }
    out.push_back(made);
  }
  return out;
}

bool made_tables_released(Stack stack, bool reentrant_recompute) {
  return stack != Stack::kLitgpt && stack != Stack::kTorchtitan && !reentrant_recompute;
}

int64_t made_persistent_dead_forward(const std::vector<MadePersistent>& made, int block) {
  int64_t bytes = 0;
  for (const MadePersistent& m : made) {
    if (block < 0 || m.producer_block > block) bytes += m.bytes;
  }
  return bytes;
}

int64_t made_persistent_dead_backward(const std::vector<MadePersistent>& made, int block) {
  int64_t bytes = 0;
  for (const MadePersistent& m : made) {
    if (block < m.first_reader) bytes += m.bytes;
  }
  return bytes;
}

// transformers 4.52.0 is the first release whose decoder layers subclass
// GradientCheckpointingLayer (huggingface/transformers#37223, merged after v4.51.0 for
// Llama and the families built on it: Mistral, Qwen2/3, Gemma, Phi-3; #38913 the rest,
// for 4.53). 5.23.0 modeling_layers.py forward_with_checkpointing:
// `self._gradient_checkpointing_func(partial(forward, self, **kwargs), *args)`; 4.44.2
// models/llama/modeling_llama.py LlamaModel.forward passes causal_mask, position_ids and
// position_embeddings as positional arguments of _gradient_checkpointing_func.
bool made_tables_in_frames(Stack stack, const PackageVersions& versions) {
  if (!runs_transformers_models(stack)) return false;
  const std::optional<Release> transformers = release_of(versions, "transformers");
  return !transformers || *transformers >= Release{4, 52, 0};
}

int64_t made_persistent_framed(const std::vector<MadePersistent>& made, const std::vector<BlockChoice>& choices,
                               std::string_view phase, int block) {
  const bool forward = phase == "forward";
  if ((!forward && phase != "backward") || block < 0) return 0;
  int64_t bytes = 0;
  for (const MadePersistent& m : made) {
    const bool live = forward ? m.producer_block <= block : block >= m.first_reader;
    bool framed = m.first_reader <= m.last_reader && m.last_reader < static_cast<int>(choices.size());
    for (int k = m.first_reader; framed && k <= m.last_reader; ++k) {
      framed = choices[static_cast<size_t>(k)] == BlockChoice::kCheckpoint;
    }
    if (live && framed) bytes += m.bytes;
  }
  return bytes;
}

}  // namespace headroom::planner
