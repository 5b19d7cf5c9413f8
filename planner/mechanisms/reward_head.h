// Reward modelling's head (TRL's RewardTrainer, trl/trainer/reward_trainer.py, 1.16.0):
// RewardTrainer builds the model with AutoModelForSequenceClassification(num_labels=1),
// transformers' generic ...ForSequenceClassification (transformers/modeling_layers.py,
// 5.23.0): the decoder, then `score`, a bias-free linear from the hidden size to one
// reward at every position, pooled at each row's last non-pad token; there is no LM head
// and no vocabulary-sized logits. compute_loss takes -logsigmoid(chosen - rejected) over
// a few values a pair. docs/stacks.md, "Recipes".
#pragma once

#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"

namespace headroom::planner {

// The name transformers gives the reward head (GenericForSequenceClassification.score).
inline constexpr const char* kRewardHead = "score";

// The causal-LM cross-entropy: a "loss" node that keeps the log-probs
// (models/graph_builder.cc lm_loss writes NAME:log_probs).
bool is_lm_loss(const graph::Node& node);

// The linear whose output loss node `loss` reads, back along first inputs through
// elementwise steps (an upcast, a soft-cap), or -1; `passed` gets the loss and those
// steps when given.
int loss_head_linear(const graph::LayerGraph& graph, int loss, std::vector<int>* passed = nullptr);

// Rewrites a causal LM's head into the reward head: the linear that computes the
// logits read by the cross-entropy ("loss" over "loss.upcast") becomes `score`
// ([1, hidden], untied, its output one value a token) and the cross-entropy becomes
// the pooled reward's loss, which keeps nothing sized by the sequence. A graph without
// a causal-LM loss (encoders, diffusion, vision) is refused: no reward head is known
// for it.
Status apply_reward_head(graph::LayerGraph& graph);

}  // namespace headroom::planner
