// RoPE's cos/sin tables as transformers before 4.45 makes them: every attention layer of
// Mistral, Phi-3, Gemma and Qwen2 calls a rotary module of its own each forward (4.44.2
// models/mistral/modeling_mistral.py MistralAttention.forward: `cos, sin =
// self.rotary_emb(value_states, position_ids)`; Qwen2's returns its cache's rows, which
// apply_rotary_pos_emb indexes by position_ids, a copy), so each layer's rope multiplies
// save tables of their own, [1, S, head_dim] in the model's dtype. Llama's model computes
// one pair and hands it to every layer already in 4.44 (LlamaModel.rotary_emb), as every
// family does from 4.45 (docs/memory-model.md, "The causal LM's frame").
#pragma once

#include <string>

#include "graph/layer_graph.h"

namespace headroom::models {

// Gives every block that reads the shared tables "<model_prefix>.rotary_emb.cos" / ".sin"
// tables of its own ("<block>.self_attn.rotary_emb.cos"), made in that block as the shared
// ones are made, and drops the shared ones. Returns how many blocks it gave tables to.
int give_layers_own_rope_tables(graph::LayerGraph& graph, const std::string& model_prefix);

}  // namespace headroom::models
