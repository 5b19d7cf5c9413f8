// FSDP2's copies on the compute stream, which nothing hides: compute waits for them.
// - After each all-gather, fully_shard copies the gathered bytes out of the flat
//   all-gather output into every parameter's unsharded storage
//   (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py wait_for_unshard ->
//   _fsdp_collectives.py foreach_all_gather_copy_out: torch.ops.fsdp.split_with_sizes_copy
//   on the current stream).
// - Before each reduce-scatter, it copies the unsharded gradients into the
//   reduce-scatter input in the reduce dtype (post_backward -> foreach_reduce ->
//   foreach_reduce_scatter_copy_in: torch.ops.fsdp.chunk_cat on the current stream,
//   before reduce_scatter_stream.wait_stream).
// FSDP1 gathers into its flat parameter and reduces on its post-backward stream,
// DeepSpeed gathers into views of its flat buffer: neither has such copies.
// Sources in docs/memory-model.md ("Time model").
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"
#include "planner/time/block_profile.h"
#include "planner/settings/hardware.h"
#include "planner/memory/model_states.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// The layer torchtitan leaves unsharded after forward (fsdp2_keeps_last_layer): the
// last checkpointable block, whose backward comes first. -1 for other stacks.
int fsdp2_kept_layer(const graph::LayerGraph& graph, const RunSettings& settings);

// Bytes the reduce-scatter copy-in reads and writes for one trainable parameter: its
// gradient at its own width, the reduce-scatter input at the reduce dtype's.
int64_t reduce_copy_in_bytes(const graph::Param& param, const RunSettings& settings);

// Milliseconds of a copy on the compute stream moving `bytes` (read plus written) at
// the time model's share of the GPU's bandwidth.
double stream_copy_ms(double bytes, const GpuSpec& gpu, const TimeModelOptions& options);

// Bytes the copy-outs of one micro-step read and write: each block's gathered bytes
// (block_gathered_bytes: the stored dtype, fp8 under the float8 all-gather, NF4 as
// stored) read once and written once, for the forward's all-gather and again for the
// backward's, except the root group (kept unsharded from forward to backward) and,
// under torchtitan, the last layer (not resharded after forward). 0 unless ZeRO-3
// is FSDP2.
int64_t fsdp2_copy_out_bytes(const graph::LayerGraph& graph, const RunSettings& settings,
                             const GlobalConfig& config);

// Bytes one backward's reduce-scatter copy-ins read and write: every trainable
// parameter's unsharded gradient read at its own width and written at the reduce
// dtype's (fp32 under mixed precision: fsdp_reduce_bytes_per_element). 0 unless
// ZeRO-3 is FSDP2.
int64_t fsdp2_reduce_copy_in_bytes(const graph::LayerGraph& graph, const RunSettings& settings,
                                   const GlobalConfig& config);

}  // namespace headroom::planner
