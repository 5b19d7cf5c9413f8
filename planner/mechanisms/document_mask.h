// Flex attention with a document mask over packed samples (torchtune packs
// samples into rows and masks attention to each sample's own causal block,
// torchtune/modules/attention_utils.py packed_block_causal_mask). The kernel
// visits only the 128 x 128 tiles of the mask's block table that hold some
// unmasked score (torch/nn/attention/flex_attention.py,
// _DEFAULT_SPARSE_BLOCK_SIZE = 128), so its work follows the document length,
// not the row's. Memory is unchanged: the saves do not depend on the mask.
// docs/stacks.md, "Attention kernels".
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"

namespace headroom::planner {

// Tiles a row of `seq` tokens visits when it packs documents of
// `document_tokens` tokens each, over the tiles of one causal document of the
// whole row (at most 1). A document placed at a random offset spans
// 1 + (L - 1) / 128 query tiles on average and its causal block m(m + 1) / 2
// tiles; the row holds seq / L of them; the causal row spans N(N + 1) / 2 with
// N = seq / 128.
double document_mask_work(int64_t document_tokens, int64_t seq);

// Scales the FLOPs of every flex_attention node of `graph` by
// document_mask_work at the run's sequence length.
void apply_document_mask(graph::LayerGraph& graph, int64_t document_tokens, int64_t seq);

}  // namespace headroom::planner
