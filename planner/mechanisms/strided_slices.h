// A linear over a slice of a tensor split along the sequence reads a view. diffusers'
// FluxAttnProcessor splits the joint attention output into its text and image parts
// and hands each to a linear through .contiguous() (models/transformers/transformer_flux.py
// FluxAttnProcessor.__call__, 0.39.0: `split_with_sizes([T, S], dim=1)`, then
// `attn.to_out[0](hidden_states.contiguous())`, `attn.to_add_out(encoder_hidden_states.contiguous())`).
// With one sample the slice of [1, T+S, h] is contiguous already: the linear keeps the
// view, whose storage is the whole output (models/flux.cc linear_on_view: the node
// reads and saves the base). With B > 1 the slice is strided over the batch, so
// .contiguous() copies it, and the copy is what the linear (PEFT's lora_A under LoRA,
// the base's weight gradient in full) keeps for backward: B·(S+T)·h more 16-bit
// elements per double block (docs/models.md, "Layout details").
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"

namespace headroom::planner {

// At `micro_batch` >= 2, gives each linear that reads a split's slice and the split's
// input (the slice's base) a contiguous copy of the slice ("<node>.contiguous", made
// in front of it), which it reads and keeps in place of the base. Returns how many
// linears it rewrote; none at micro-batch 1.
int apply_strided_slice_copies(graph::LayerGraph& graph, int64_t micro_batch);

}  // namespace headroom::planner
