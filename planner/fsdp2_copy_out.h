// FSDP2's all-gather copy-out: after each all-gather, fully_shard copies the
// gathered bytes out of the flat all-gather output into every parameter's
// unsharded storage, on the compute stream (torch/distributed/fsdp/_fully_shard/
// _fsdp_param_group.py wait_for_unshard -> _fsdp_collectives.py
// foreach_all_gather_copy_out, torch.ops.fsdp.split_with_sizes_copy on the current
// stream). That copy is memory traffic nothing hides: compute waits for it.
// Sources in docs/memory-model.md ("Time model").
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"
#include "planner/model_states.h"
#include "planner/run_settings.h"

namespace headroom::planner {

// Bytes the copy-outs of one micro-step read and write: each block's gathered bytes
// (block_gathered_bytes: the stored dtype, fp8 under the float8 all-gather, NF4 as
// stored) read once and written once, for the forward's all-gather and again for the
// backward's, except the root group (kept unsharded from forward to backward) and,
// under torchtitan, the last layer (not resharded after forward). 0 unless ZeRO-3
// is FSDP2.
int64_t fsdp2_copy_out_bytes(const graph::LayerGraph& graph, const RunSettings& settings,
                             const GlobalConfig& config);

}  // namespace headroom::planner
