// Which optimizer-state layout transformers' Trainer gives a parameter when it builds a
// bitsandbytes optimizer: the 32-bit override of embeddings under an 8-bit optimizer.
// docs/memory-model.md, "Optimizer states".
#pragma once

#include "graph/layer_graph.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Whether `node`'s weight keeps 32-bit (fp32) bitsandbytes states under an 8-bit
// optimizer. transformers' Trainer.create_optimizer (5.23.0 trainer.py, after the
// optimizer is made; the same since 4.x) registers every nn.Embedding's weight with
// bitsandbytes' GlobalOptimManager as {"optim_bits": 32} when the optimizer class is
// bitsandbytes' and optim_bits is 8 (adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit);
// Optimizer8bit.step's check_overrides matches it by id among the param groups and
// init_state gives it fp32 state1 and state2 (bitsandbytes 0.50.2
// optim/optimizer.py). A tied LM head is the same Parameter: its one pair of states
// is fp32. Only where the Trainer builds the optimizer over unsharded parameters
// (the hf-trainer stack: TRL, axolotl and LLaMA-Factory's imports; not torchtune or
// litgpt, which make their bitsandbytes optimizers themselves, nor ZeRO/FSDP).
bool trainer_keeps_32bit_states(const RunSettings& settings, const graph::Node& node, bool sharded_optimizer);

// The layout of `node`'s trainable parameter's states: the run's optimizer, or
// 32-bit AdamW where the Trainer overrides it (above).
OptimizerKind state_layout(const RunSettings& settings, const graph::Node& node, bool sharded_optimizer);

}  // namespace headroom::planner
