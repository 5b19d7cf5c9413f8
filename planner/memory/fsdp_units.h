// FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel): the FlatParameter of
// each wrapped unit and one rank's shard of it. Composer wraps each transformer
// block (llm-foundry's fsdp_wrap_fn: isinstance(module, MPTBlock)) and the root
// holds the rest (embeddings, final norm, head): the same units as FSDP2's
// per-layer groups and root (in_fsdp2_root). Sources in docs/memory-model.md
// ("FSDP1").
#pragma once

#include <cstdint>
#include <vector>

#include "graph/layer_graph.h"
#include "planner/memory/state_bytes.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

struct FlatParamUnit {
  int64_t elements = 0;            // every parameter of the unit (tied ones at their owner), in
                                   // elements of the FlatParameter's dtype (flat_param_width)
  int64_t trainable_elements = 0;  // of which train
  int64_t constant_bytes = 0;      // quantization constants: never flattened, whole on every rank
  bool root = false;               // the root unit (the blocks in_fsdp2_root names)
  int block = -1;                  // the layer's block; -1 for the root
};

// Bytes of one element of a FlatParameter: fp32 under mixed precision (the master
// copy), the 16-bit dtype of a pure 16-bit model.
int64_t flat_param_width(Precision precision);

// One unit per layer (a block outside the root group), in block order, then the
// root unit when it holds parameters. A frozen 4-bit weight is flattened as its
// packed storage: QLoRA under FSDP loads it with bnb_4bit_quant_storage set to the
// FlatParameter's dtype (PEFT's FSDP QLoRA recipe; bitsandbytes Params4bit), so it
// counts its packed bytes, not its logical elements. Its quantization constants
// (QuantState's absmax) are attributes, not parameters, and stay whole on each rank.
std::vector<FlatParamUnit> flat_param_units(const graph::LayerGraph& graph, const RunSettings& settings);

// Elements of one rank's shard of a FlatParameter of `elements`: FlatParamHandle
// pads the flat parameter to a multiple of the world size and gives each rank an
// equal chunk (_flat_param.py _get_shard: numel_to_pad = world * chunk - numel).
int64_t flat_param_shard_elements(int64_t elements, int world);

// torch's FSDPs: per block, the bytes of the layer units' unsharded parameters live
// (beside the root group, gathered all step) while it runs forward and backward.
struct FsdpInFlight {
  std::vector<int64_t> forward;
  std::vector<int64_t> backward;
  // A block's backward before its unit's pre-backward hook fires (its first node
  // with parameters: the loss runs before the kept tail's lm_head); equal to
  // `backward` where the hook fires as the block's backward starts.
  std::vector<int64_t> backward_before;
};
FsdpInFlight fsdp_in_flight(const graph::LayerGraph& graph, const RunSettings& settings, int zero_stage,
                            Accounting accounting);

// FSDP1's model states at ZeRO-3 in place of the per-parameter shards
// model_states prices for FSDP2: per unit one FlatParameter shard (fp32 under
// mixed precision, else the parameters' dtype) and, when any of its parameters
// trains, one sharded gradient of the same size and dtype (use_orig_params keeps
// the frozen parameters' share too); and the reduce-scatter buffers of the
// largest layer unit and of the root (reduce_scatter_bytes, fsdp2_root_reduce_scatter).
// Under CPUOffload (fsdp_cpu_offload) the shards and their gradients are on the host
// instead (host_shard_bytes, host_grad_bytes), and each unit's sharded gradient stays
// on the GPU from its reduce-scatter to the end of backward (offload_grad_shards).
void apply_flat_params(const graph::LayerGraph& graph, const RunSettings& settings, const GlobalConfig& config,
                       Accounting accounting, ModelStates& out);

}  // namespace headroom::planner
