#include "planner/time/made_persistent.h"

#include <algorithm>

#include "planner/mechanisms/loss_variants.h"

namespace headroom::planner {

std::vector<MadePersistent> made_persistent(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                            const std::vector<int64_t>& bytes) {
  std::vector<MadePersistent> out;
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
    MadePersistent made;
    made.bytes = bytes[t];
    made.producer_block = graph.nodes[static_cast<size_t>(producer)].block;
    made.first_reader = made.producer_block;
    bool read = false;
    for (int consumer : analysis.consumers[t]) {
      const int block = graph.nodes[static_cast<size_t>(consumer)].block;
      made.first_reader = read ? std::min(made.first_reader, block) : block;
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

}  // namespace headroom::planner
