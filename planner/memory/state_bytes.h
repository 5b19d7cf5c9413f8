// What the model states are made of, before any sharding strategy adds them up:
// the bytes per element of parameters, gradients, optimizer states and master
// weights; a parameter's stored dtype; per-block parameter bytes; the FSDP
// predicates; the ModelStates value model_states() fills (memory/model_states.h).
// Sources for every factor are in docs/memory-model.md ("Model states").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

enum class Accounting {
  kAllocated,  // torch.cuda.memory_allocated: requests rounded to 512 B
  kReserved,   // torch.cuda.memory_reserved: with large-segment rounding
};
int64_t account(int64_t bytes, Accounting accounting);

// The few global choices the planner enumerates.
struct GlobalConfig {
  int zero_stage = 0;
  Offload offload_optimizer = Offload::kNone;
  Offload offload_param = Offload::kNone;
  int64_t micro_batch = 1;
  int64_t grad_accum = 1;
};

// What the model is as the run holds it: parameters counted once (tied weights
// once), those that train, and the bytes of its weights by stored dtype (the
// training mode applied: NF4 and its constants under QLoRA, fp32 adapters).
struct ModelSize {
  int64_t total_params = 0;
  int64_t trainable_params = 0;
  std::map<std::string, int64_t> weight_bytes_by_dtype;  // "bf16", "f32", "nf4", "uint8", ...
  // Of the sequence: the tokens a vision-language model's image takes (Qwen2.5-VL:
  // graph.sequence.extra_tokens of a token model), 0 for others.
  int64_t image_tokens = 0;
  // An encoder-decoder model's decoder tokens per sample (T5: --target-seq); the
  // sequence is then the encoder's. 0 for others.
  int64_t target_tokens = 0;
};
ModelSize model_size(const graph::LayerGraph& graph, Precision precision);
using graph::is_quantized_storage;  // graph/dtype.h
// The dtype a parameter is held in on the GPU under `precision`.
graph::DType stored_dtype(const graph::Param& param, Precision precision);

// One rank's share of `total` split evenly over `world`, rounded up: what ZeRO's
// and FSDP's partitions hold per rank.
inline int64_t ceil_div(int64_t total, int64_t world) { return (total + world - 1) / world; }

// bitsandbytes' 8-bit optimizers keep 32-bit states for tensors under
// min_8bit_size = 4096 elements (bitsandbytes/optim/optimizer.py init_state).
inline constexpr int64_t kBnbMin8bitSize = 4096;

struct ModelStates {
  // GPU bytes per rank.
  int64_t params = 0;             // resident (partition under ZeRO-3), incl. quantization constants
  // Of params: what the model holds outside module.parameters(): module buffers (RoPE
  // caches, BatchNorm statistics, whole on every rank) and bitsandbytes' quantization state.
  int64_t buffers = 0;
  int64_t grads_full = 0;         // all gradients this rank keeps at the optimizer step
  int64_t optimizer = 0;          // optimizer states on the GPU, in the caching allocator
  int64_t paged_optimizer = 0;    // bitsandbytes paged states: unified memory, outside it
  int64_t master = 0;             // fp32 master weights on the GPU
  int64_t comm_buckets = 0;       // ZeRO reduce / allgather buckets, allocated for the whole run
  // The part of comm_buckets that holds gradients: ZeRO-3's reduce bucket, whose
  // views the parameters' .grad become (stage3.py __add_grad_to_ipg_bucket).
  int64_t bucket_gradients = 0;
  int64_t gathered_params = 0;    // ZeRO-3: full parameters gathered for the blocks in flight
  int64_t float8_gathered_params = 0;  // elements all-gathered in fp8 (float8_all_gather), 1 byte each
  // torch's FSDPs: per block, the layer units' unsharded parameters live beside the
  // root group while the block runs forward and backward (fsdp_in_flight); empty
  // otherwise (gathered_params then holds DeepSpeed's gathered blocks).
  std::vector<int64_t> gathered_fwd_block;
  std::vector<int64_t> gathered_bwd_block;
  std::vector<int64_t> gathered_bwd_before_block;  // before the unit's pre-backward hook (FsdpInFlight)
  // FSDP2: a block's unsharded gradients and its reduce-scatter input while its
  // backward ends (the largest block's), on top of the sharded gradients.
  int64_t reduce_scatter_bytes = 0;
  std::vector<int64_t> reduce_scatter_block;  // per block: its layer unit's (0 for the root's blocks)
  // FSDP2, per block: the reduce-scatter input among reduce_scatter_block, a buffer
  // and not a `.grad` (the breakdown's ZeRO buffers; the root's at block 0)
  std::vector<int64_t> reduce_scatter_input_block;
  // FSDP1, per block: its layer unit's reduce buffers beyond the unsharded gradient
  // (the reduce-dtype cast, the pad, the shard and its cast), made by the unit's
  // post-backward hook once every node of the block has run backward (empty: none).
  std::vector<int64_t> fsdp1_post_backward_block;
  // FSDP2's root group (the parameters outside the per-layer groups): its unsharded
  // parameters (also counted in gathered_params), its unsharded gradients per block
  // (alive from that block's backward to the end of backward), its trainable
  // elements and the reduce-scatter input of its one reduction at the end of backward.
  int64_t fsdp2_root_params = 0;
  std::vector<int64_t> fsdp2_root_grads;
  int64_t fsdp2_root_trainable = 0;
  int64_t fsdp2_root_reduce_scatter = 0;
  // FSDP1 CPU offload: per block, the sharded gradient its unit's reduce-scatter
  // leaves on the GPU (_saved_grad_shard, in the shard's dtype), held until the
  // final callback has waited for every copy to the host; the root's at index -1
  // is root_offload_grad_shard.
  std::vector<int64_t> offload_grad_shards;
  int64_t root_offload_grad_shard = 0;
  // FSDP accumulating under no_sync (accumulates_unsharded): the unsharded
  // gradients kept from the first micro-step's backward to the last one's
  // reduce-scatter, per block outside the root, the root's, and their sum.
  std::vector<int64_t> unsynced_block_grads;
  int64_t root_unsynced_grads = 0;
  int64_t unsynced_grads = 0;
  // torch's FSDPs (optimizer on the GPU): each unit's sharded gradient, one
  // allocation made by its post-backward reduce-scatter and freed by zero_grad
  // (set_to_none), per block outside the root, and the root's, made in the final
  // callback. Empty otherwise; their sum is grads_full.
  std::vector<int64_t> sharded_block_grads;
  int64_t root_sharded_grads = 0;
  bool grads_progressive = true;  // grads appear block by block during the first backward
  std::vector<int64_t> block_grads;  // per block: gradient bytes it adds (progressive case)
  // optimizer.step() temporaries, and optimizer-in-backward (planner/memory/optimizer_step.h).
  int64_t step_transient = 0;
  bool grads_in_backward = false;  // each gradient freed as soon as it is produced
  int64_t in_backward_bytes = 0;   // the largest gradient and its step's temporaries
  // The optimizer's per-parameter state tensors on the GPU in creation order
  // (AdamW: exp_avg, then exp_avg_sq), bytes before rounding; their sum is part of
  // `optimizer`. Empty where ZeRO keeps flat partitions.
  std::vector<int64_t> state_tensors;
  // Whether the optimizer makes them at its first step() rather than before training.
  bool states_created_lazily = false;
  // foreach AdamW's step temporaries as the separate tensors _foreach_sqrt returns,
  // one per exp_avg_sq (their sum is step_transient); empty when one buffer prices them.
  std::vector<int64_t> step_transient_tensors;

  // Host RAM per node and disk, bytes.
  int64_t host_offload = 0;    // pinned offloaded states and buffers, all ranks of a node
  // FSDP CPU offload, per rank: the sharded parameters copied in for each all-gather,
  // and the sharded gradients copied out each micro-step (for the time model).
  int64_t host_shard_bytes = 0;
  int64_t host_grad_bytes = 0;
  int64_t host_root_shard_bytes = 0;  // of host_shard_bytes, the root's: copied in once unless FSDP1 restages it
  int64_t nvme = 0;            // optimizer/params swapped to NVMe, all ranks of a node
  int64_t checkpoint = 0;      // one training-state checkpoint (weights + optimizer state)

  int64_t total_params = 0;      // counted once (tied weights once)
  int64_t trainable_params = 0;
};

// Whether a block's parameters belong to FSDP2's root group: the parameters no
// fully_shard of their own wraps. torchtitan's parallelize_llama and torchtune's
// shard_model wrap each transformer layer (and torchtune the modules its
// custom_sharded_layers names: settings.fsdp_own_groups), then the whole model,
// so the root holds the blocks that are not layers: embeddings, the final norm, the head.
// accelerate from 1.14 wraps the input embeddings and the tail (final norm, head) as
// units of their own (fsdp2_carved_ends).
bool in_fsdp2_root(const graph::LayerGraph& graph, int block, const RunSettings& settings);

// Whether this run's FSDP2 units include accelerate's carved ends
// (accelerate_carves_fsdp2_ends) for this graph: an "embedding" block and an
// "lm_head" block whose output embeddings are not tied to the input's.
bool fsdp2_carved_ends(const graph::LayerGraph& graph, const RunSettings& settings);

// The tail unit accelerate keeps unsharded from its forward to its backward (its
// fully_shard reshard_after_forward=False): the "lm_head" block, or -1.
int fsdp2_kept_tail(const graph::LayerGraph& graph, const RunSettings& settings);

// Whether the run is FSDP2 with CPUOffloadPolicy (torchtune fsdp_cpu_offload, torchtitan
// --training.enable_cpu_offload): ZeRO-3 under an FSDP2 stack with parameters and the
// optimizer offloaded to the CPU. The sharded parameters, their gradients and the
// optimizer (and its step) live on the host; the GPU holds the unsharded parameters of
// the groups in flight, copied in shard by shard before each all-gather
// (torch/distributed/fsdp/_fully_shard/_fsdp_param.py all_gather_inputs), and each
// reduce-scattered gradient until its copy to the host (_fsdp_collectives.py
// foreach_reduce). docs/stacks.md, "FSDP2".
// FSDP1's CPUOffload(offload_params=True) is the same split by FlatParameter: the
// pinned shard and its preallocated pinned gradient on the host, each shard copied
// in before its unit's all-gather, each sharded gradient held on the GPU until the
// end of backward (torch/distributed/fsdp/_flat_param.py; docs/memory-model.md, "FSDP1").
bool fsdp_cpu_offload(const RunSettings& settings, const GlobalConfig& config);

// Whether, under that offload, the root's shard is copied in and cast again at its
// pre-backward: FSDP1 with MixedPrecision runs _use_low_precision_shard even for a
// unit still unsharded; without it, and under FSDP2, the unsharded root is already
// on the GPU (_flat_param.py pre_unshard).
bool fsdp_restages_root(const RunSettings& settings, int zero_stage);

// Whether Accelerate upcasts the trainable parameters of a 16-bit model to fp32
// before FSDP shards them, as it does under mixed precision (the Trainer's
// bf16=True over a bf16 model, "following DeepSpeed's strategy to hold the
// parameters in full precision"): each trainable shard, its sharded gradient and
// torch.optim's states are then fp32, while the all-gather stays 16-bit
// (set_mixed_precision: param_dtype and reduce_dtype the 16-bit dtype). accelerate
// 1.15 accelerator.py prepare_model (FSDP1: each trainable FlatParameter, from
// 0.34 at least) and utils/fsdp_utils.py fsdp2_prepare_model ("Upcast to fp32
// master weights", skipped when the model holds bitsandbytes Params4bit).
// `zero_stage`: the plan's (the search prices several under one settings).
// docs/memory-model.md, "Accelerate's fp32 upcast under FSDP".
bool fsdp_upcasts_trainable(const RunSettings& settings, int zero_stage);

// Whether FSDP keeps `param`'s shard in fp32 while it gathers 16 bits: every
// unquantized parameter under mixed precision, the trainable ones under the
// upcast above (`upcast`: fsdp_upcasts_trainable, decided once per run). Callers
// check that FSDP shards the run.
bool fsdp_fp32_shard(const graph::Param& param, Precision precision, bool upcast);

// Whether FSDP accumulates this run's micro-steps under no_sync (the stack's
// fsdp_no_sync, at the top of its band): before the last micro-step no unit
// reduce-scatters, and each keeps its unsharded gradient on the GPU. FSDP1: one
// unpadded gradient a FlatParameter in the parameters' compute dtype, added to in
// place (_runtime_utils.py _post_backward_hook returns before reducing;
// _flat_param.py prepare_gradient_for_backward keeps it). FSDP2: each trainable
// parameter's unsharded gradient, upcast to reduce_dtype to accumulate
// (_fsdp_param.py to_accumulated_grad_if_needed). docs/memory-model.md.
bool accumulates_unsharded(const RunSettings& settings, const GlobalConfig& config);

// Per block, the bytes of its own parameters as stored on the GPU (tied ones counted at
// their owner; buffers, which ZeRO-3 and FSDP neither shard nor gather, left out).
std::vector<int64_t> block_param_bytes(const graph::LayerGraph& graph, Precision precision);
// Per block, the bytes ZeRO-3 / FSDP2 all-gathers for it: block_param_bytes, with
// the weights of fp8 linears at one byte each under settings.float8_all_gather
// (torchao's WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather casts the
// shard to fp8, and fsdp_post_all_gather wraps the gathered bytes as the weight).
std::vector<int64_t> block_gathered_bytes(const graph::LayerGraph& graph, const RunSettings& settings);

// Per block, the bytes of FSDP's shards of its parameters before dividing by the
// group: fp32 where fsdp_fp32_shard says, the storage otherwise.
std::vector<int64_t> block_shard_bytes(const graph::LayerGraph& graph, const RunSettings& settings, int zero_stage);

// Bytes per element of parameters, gradients, optimizer states and master
// weights for a precision and optimizer; exposed for tests against the ZeRO paper.
int64_t param_bytes_per_element(Precision precision, bool trainable);
int64_t grad_bytes_per_element(Precision precision);
int64_t master_bytes_per_element(Precision precision);
// Bytes per element in which torch's FSDPs reduce-scatter a gradient: 4 when the
// reduce dtype is fp32 (reduce_dtype_of), else the gradient's own width.
int64_t fsdp_reduce_bytes_per_element(const RunSettings& settings);
// The state tensors the optimizer allocates for one parameter of `shape`, in
// bytes, each its own allocation (optimizer_state_bytes is their sum).
std::vector<int64_t> optimizer_state_tensors(OptimizerKind optimizer, Precision precision,
                                             const std::vector<int64_t>& shape);
// Optimizer state bytes for one parameter tensor of `shape`.
int64_t optimizer_state_bytes(OptimizerKind optimizer, Precision precision,
                              const std::vector<int64_t>& shape);

// Bytes per element of a trainable tensor's gradient: grad_bytes_per_element,
// except LoRA adapters kept in fp32 under pure bf16 (PEFT), whose gradients,
// like the adapters and their torch.optim states, stay fp32.
int64_t grad_bytes(const graph::Param& param, Precision precision);

// A parameter used by several nodes (tied embeddings, a chunked head): its gradient
// is summed in autograd's input buffer from the first use backward reaches, the
// node in the latest block, until the last. Per owner parameter name: that block.
// Parameters used once are not listed.
std::map<std::string, int> shared_gradient_first_block(const graph::LayerGraph& graph);

// Whether a LoRA adapter (or a module the script upcast) stays fp32 on a pure-bf16
// model, with its gradient and torch.optim states (PEFT autocast_adapter_dtype).
bool fp32_adapter(const graph::Param& param, Precision precision);
// Whether ZeRO-3 / FSDP2 all-gathers `param` of `node` in fp8 (settings.float8_all_gather).
bool gathered_in_fp8(const graph::Node& node, const graph::Param& param, const RunSettings& settings);

// Device bytes of one parameter tensor before partitioning: its 16- or 32-bit
// copy, or its quantized storage for frozen NF4/int8 weights and constants.
int64_t param_storage_bytes(const graph::Param& param, Precision precision);

}  // namespace headroom::planner
