#include "models/t5.h"
#include "planner/predict/prediction.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "graph/op_traits.h"
#include "models/rope_caches.h"
#include "planner/mechanisms/input_require_grads.h"
#include "planner/mechanisms/litgpt_model.h"
#include "planner/mechanisms/loss_variants.h"
#include "planner/mechanisms/t5_position_bias.h"
#include "planner/mechanisms/trl_fused_head.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/dora_setup.h"
#include "planner/memory/rope_cache_saves.h"
#include "planner/settings/stack.h"
#include "planner/time/fsdp2_stream_copies.h"
#include "planner/predict/simulator.h"
#include "planner/predict/shared_grads_accumulating.h"
#include "planner/predict/step_builder.h"
#include "planner/time/made_persistent.h"
#include "planner/time/step_time.h"

namespace headroom::planner {

int64_t paged_migrated_bytes(int64_t paged, int64_t capacity, int64_t held) {
  // Unified memory gets what the process has not reserved. The UVM driver evicts
  // the least recently migrated 2 MB root chunk (open-gpu-kernel-modules,
  // kernel-open/nvidia-uvm/uvm_pmm_gpu.c: root_chunks.va_block_used, an LRU list
  // that pick_root_chunk_to_evict takes the head of). The optimizer sweeps the
  // states in the same order every step, and LRU under a cyclic sweep larger
  // than its room misses on every chunk: each step moves all of them in, and
  // the updated ones out.
  const int64_t room = std::max<int64_t>(0, capacity - held);
  return paged > room ? 2 * paged : 0;
}

namespace {

// The gradients that are in the walk's base with the parameters, held from the
// first backward on (litgpt's kept StableEmbedding gradient, kept_gradient).
int64_t kept_gradient_bytes(const ModelContext& context, const RunSettings& settings, Accounting accounting) {
  int64_t bytes = 0;
  for (const graph::Node& node : context.graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (kept_gradient(param)) bytes += account(param_storage_bytes(param, settings.precision), accounting);
    }
  }
  return bytes;
}

// Tensor t's bytes at the run's micro-batch and sequence, as `accounting` counts them.
int64_t run_tensor_bytes(const ModelContext& context, const GlobalConfig& config, size_t t, Accounting accounting) {
  return account(graph::tensor_bytes(context.graph.tensors[t], context.compute_dtype, config.micro_batch,
                                     context.seq_len),
                 accounting);
}

// The persistent tensors the caller holds without autograd (held_by_caller): in the
// walk's base with the other persistent tensors, labelled transient at the peak.
int64_t caller_held_bytes(const ModelContext& context, const GlobalConfig& config, Accounting accounting) {
  int64_t bytes = 0;
  for (size_t t = 0; t < context.graph.tensors.size(); ++t) {
    if (!context.analysis.persistent[t] || !held_by_caller(context.graph.tensors[t])) continue;
    bytes += run_tensor_bytes(context, config, t, accounting);
  }
  return bytes;
}

// The persistent tensors a forward frame holds and autograd does not: made by a node,
// read by blocks past the next, saved by none, and read or held (Node::holds) in the
// peak's block or later (T5ForConditionalGeneration.forward's encoder output, which every
// decoder layer's cross-attention reads and, with k and v frozen under LoRA, none keeps,
// and the returned Seq2SeqLMOutput holds to the forward's end; modeling_t5.py 5.23.0).
// In the walk's base with the other persistent tensors; at a peak in the forward they
// are transient, as no pack hook saw them (the oracle's Flan-T5 rows; docs/memory-model.md,
// "Categories at the peak").
int64_t frame_held_bytes(const ModelContext& context, const GlobalConfig& config, const StepPeak& peak,
                         Accounting accounting) {
  if (peak.phase != "forward" || peak.block < 0) return 0;
  const graph::GraphAnalysis& a = context.analysis;
  std::vector<char> saved(context.graph.tensors.size(), 0);
  for (const std::vector<int>& saves : a.node_saves) {
    for (int t : saves) saved[static_cast<size_t>(t)] = 1;
  }
  auto used_from_peak = [&](size_t t) {
    for (const std::vector<int>* users : {&a.consumers[t], &a.holders[t]}) {
      for (int n : *users) {
        if (context.graph.nodes[static_cast<size_t>(n)].block >= peak.block) return true;
      }
    }
    return false;
  };
  int64_t bytes = 0;
  for (size_t t = 0; t < context.graph.tensors.size(); ++t) {
    if (!a.persistent[t] || a.producer[t] < 0 || saved[t] || !used_from_peak(t)) continue;
    if (held_by_caller(context.graph.tensors[t])) continue;
    bytes += run_tensor_bytes(context, config, t, accounting);
  }
  return std::min(bytes, peak.activations);
}

// The input embeddings' leaves that enable_input_require_grads makes
// (input_grad_leaves): the walk keeps them with the embeddings block's saved tensors,
// as long as their AccumulateGrad nodes hold them; at a peak in a later block they are
// transient, no pack hook having seen them (the oracle's BERT and CLIP LoRA rows
// under non-reentrant checkpointing: the frozen word embedding's bf16 output). One made
// in a block that others run backward after (T5's decoder embedding) is held with its
// `.grad` through their backward (hold_input_grad_leaves): both transient there, as the
// oracle's Flan-T5 rows have them (an `embedding` and a `native_dropout_backward`).
int64_t accumulate_grad_leaf_bytes(const ModelContext& context, const GlobalConfig& config, const StepPeak& peak,
                                   Accounting accounting) {
  if (peak.block < 0) return 0;
  int64_t bytes = 0;
  for (int t : input_grad_leaves(context.graph)) {
    const int producer = context.analysis.producer[static_cast<size_t>(t)];
    if (producer < 0) continue;
    const int block = context.graph.nodes[static_cast<size_t>(producer)].block;
    const int64_t leaf = run_tensor_bytes(context, config, static_cast<size_t>(t), accounting);
    if (block < peak.block) bytes += leaf;
    // In the backward of a block before it, the leaf and its `.grad` (hold_input_grad_leaves).
    if (block > peak.block && peak.phase == "backward") bytes += 2 * leaf;
  }
  return std::min(bytes, peak.activations);
}

// The gradients of T5's zero cross-attention bias leaves (mechanisms/t5_position_bias.h),
// which the walk holds through the backward of the blocks before their last reader's
// with what autograd keeps there: a `.grad` of no parameter, seen by no pack hook, so
// transient at the peak (the oracle's Flan-T5 rows under checkpointing: an `add` of
// [1, heads, T, S] in the encoder's backward).
int64_t t5_bias_gradient_bytes(const ModelContext& context, const GlobalConfig& config, const StepPeak& peak,
                               Accounting accounting) {
  if (peak.phase != "backward" || peak.block < 0) return 0;
  int64_t bytes = 0;
  for (int t : t5_bias_leaves(context.graph)) {
    if (t5_bias_gradient_block(context.graph, context.analysis, t) <= peak.block) continue;
    bytes += run_tensor_bytes(context, config, static_cast<size_t>(t), accounting);
  }
  return std::min(bytes, peak.activations);
}

// The made tables checkpoint frames hold rather than save (made_tables_in_frames),
// transient at the peak. Not those a model hands its blocks positionally, which each
// checkpointed reader's _NoopSaveInputs saves (torch 2.11 utils/checkpoint.py):
// diffusers' rotary embedding (0.39.0 transformer_flux.py
// FluxTransformer2DModel.forward: `_gradient_checkpointing_func(block, ...,
// image_rotary_emb, ...)`), T5's position biases (transformers 5.23.0 modeling_t5.py
// T5Stack.forward: `layer_module(hidden_states, attention_mask, position_bias, ...,
// encoder_decoder_position_bias, ...)`, "as a positional argument for gradient
// checkpointing"): activations, but in the block that makes them, where the forward's
// (or, in its backward, the recompute's) own copy is in flight (the oracle's Flan-T5
// rows: the [S, S, heads] bias a saved `embedding` at encoder.block.11's backward under
// LoRA, transient at encoder.block.0's in full).
int64_t made_tables_in_flight(const ModelContext& context, const RunSettings& settings,
                              const std::vector<MadePersistent>& made, const std::vector<BlockChoice>& blocks,
                              const StepPeak& peak) {
  if (!made_tables_in_frames(settings.stack, settings.versions)) return 0;
  const std::string& family = context.graph.family;
  if (family != "flux" && family != "sd3" && family != "t5") {
    return made_persistent_framed(made, blocks, peak.phase, peak.block);
  }
  std::vector<MadePersistent> own;
  for (const MadePersistent& m : made) {
    if (m.producer_block == peak.block) own.push_back(m);
  }
  return made_persistent_framed(own, blocks, peak.phase, peak.block);
}

// A shared weight's gradient (a tied embedding and LM head) waits in autograd's input
// buffer from its first use's backward until its last use's has run: the engine calls
// AccumulateGrad once, with the sum (torch/csrc/autograd/input_buffer.cpp accumulate,
// engine.cpp). Until then it is in flight, not yet a `.grad`: transient at the peak
// (docs/memory-model.md, "Categories at the peak"). At the last use's own backward a
// sum made out of place is the `.grad` to be, the buffer beside it already priced
// apart (BackwardGradients::partial_gradients); added in place, the buffer is it.
struct SharedUses {
  int first = -1;        // the block of its first use in backward (the latest in forward)
  int last = 1 << 30;    // the block of its last use in backward
  int count = 0;
  bool trainable = false;
  bool fused = false;    // first used by TRL's fused head or Liger's, which hand on a fresh gradient
  bool chunked = false;  // first used by a node applying it several times: a fresh sum
  int64_t elements = 0;
};

int64_t shared_grads_in_flight(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                               const BuiltStep& step, const StepPeak& peak, Accounting accounting) {
  if (peak.phase != "backward" || !step.states.grads_progressive) return 0;
  if (config.grad_accum != 1) {
    // Accumulating: the first partial beside the `.grad` an earlier micro-step made, which
    // the walk counts with the gradients (shared_grads_accumulating.h); in flight all the same.
    const std::vector<int64_t> held = shared_grads_held_accumulating(context.graph, settings, config, step.states,
                                                                     accounting, static_cast<size_t>(peak.block) + 1);
    return peak.block >= 0 ? std::min(held[static_cast<size_t>(peak.block)], peak.gradients) : 0;
  }
  std::map<std::string, SharedUses> uses;
  for (const graph::Node& node : context.graph.nodes) {
    for (const graph::Param& param : node.params) {
      SharedUses& u = uses[param.tied_to.empty() ? param.name : param.tied_to];
      u.count += node.weight_uses;
      if (param.tied_to.empty()) u.trainable = param.trainable, u.elements = param.elements();
      if (node.block > u.first) {
        u.first = node.block, u.chunked = node.weight_uses > 1;
        u.fused = node.op == kTrlFusedLogprobOp || node.op == graph::op::kFusedLinearCe;
      }
      u.last = std::min(u.last, node.block);
    }
  }
  const int64_t compute_width = graph::dtype_bytes(context.compute_dtype, 1);
  const int64_t given = grad_bytes_per_element(settings.precision);
  const int64_t width = given > 0 ? given : compute_width;
  int64_t bytes = 0;
  for (const auto& [name, u] : uses) {
    if (u.count < 2 || !u.trainable || (u.first == u.last && !u.chunked) || peak.block > u.first) continue;
    // torchtune's eager chunked head: its partials' sum is a fresh tensor, and in flight
    // through the head's own backward (docs/memory-model.md, "Categories at the peak").
    const bool in_place = width != compute_width || u.fused || u.chunked;
    if (peak.block > u.last || (in_place && peak.block == u.last)) {
      bytes += account(u.elements * width, accounting);
    }
  }
  return std::min(bytes, peak.gradients);
}

// The breakdown at a walk's peak, in the walk's accounting: the bytes its peak holds,
// split by what holds them. The reserved one is what runs out (the allocator
// simulation adds its share to it); the allocated one is what max_memory_allocated
// holds, tensor by tensor as the meta-device oracle counts (no context, no slack).
MemoryBreakdown breakdown_at(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                             const BuiltStep& step, const std::vector<BlockChoice>& blocks, const StepPeak& peak,
                             Accounting accounting) {
  MemoryBreakdown m;
  const bool reserved = accounting == Accounting::kReserved;
  m.cuda_context = reserved ? context_bytes(context, settings) : 0;
  m.workspaces = account(context.gpu.cublas_workspace_bytes, accounting);
  const int64_t kept_grads = kept_gradient_bytes(context, settings, accounting);
  m.parameters = step.states.params + step.reference_weights - kept_grads;
  m.buffers = step.states.buffers;
  m.saved_buffers =
      saved_rope_cache_bytes(context.graph, blocks, SavesAt{peak.phase, peak.block}, settings.precision, accounting) +
      saved_dora_setup_bytes(context.graph, settings.precision, accounting);
  const int64_t in_flight = shared_grads_in_flight(context, settings, config, step, peak, accounting);
  m.gradients = peak.gradients + step.states.bucket_gradients - in_flight + kept_grads;
  m.optimizer_states = step.states.optimizer;
  m.paged_optimizer_states = step.states.paged_optimizer;
  m.master_weights = step.states.master;
  m.zero_buffers = step.states.comm_buckets - step.states.bucket_gradients +
                   (peak.block >= 0 ? step.states.gathered_params : 0) + peak.gathered;
  const int64_t held = caller_held_bytes(context, config, accounting);
  const int64_t framed = made_tables_in_flight(context, settings, step.model.made_persistent, blocks, peak);
  const int64_t leaves = std::min(accumulate_grad_leaf_bytes(context, config, peak, accounting) +
                                      frame_held_bytes(context, config, peak, accounting) +
                                      t5_bias_gradient_bytes(context, config, peak, accounting) + framed,
                                  peak.activations);
  m.activations = peak.activations - held - leaves;
  m.transient = peak.transient + held + in_flight + leaves;
  m.allocator = reserved ? kPoolSlackBytes : 0;
  m.vllm = peak.vllm;
  return m;
}

// The caching-allocator simulation sees fragmentation the block walk cannot:
// when it reserves more, the difference is the allocator's share.
Simulation simulate_allocator_share(const ModelContext& context, const RunSettings& settings,
                                    const GlobalConfig& config, const std::vector<BlockChoice>& blocks,
                                    Prediction& out) {
  MemoryBreakdown& m = out.peak;
  SimulatorOptions quiet;
  quiet.record_events = false;
  quiet.max_memory_samples = 0;
  Simulation simulation = simulate(context, settings, config, blocks, quiet);
  out.simulated_peak_allocated = std::max(simulation.peak_allocated, simulation.first_step_peak_allocated);
  out.simulated_peak_live = simulation.peak_live;
  // Reserved memory only grows from step to step (the allocator caches), unless
  // an out-of-memory retry released segments: take the larger of the two.
  const int64_t simulated_reserved = std::max(simulation.peak_reserved, simulation.first_step_peak_reserved);
  out.simulated_peak_reserved = simulated_reserved;
  if (simulated_reserved > out.peak_reserved) {
    m.allocator += simulated_reserved - out.peak_reserved;
    out.peak_reserved = simulated_reserved;
  }
  return simulation;
}

// Batches of varied length (RunSettings::shortest_sample) grow the allocator's
// cache beyond what batches at seq_len reserve: the band runs from one to the other.
void add_varied_lengths(const Simulation& simulation, Prediction& out) {
  MemoryBreakdown& m = out.peak;
  if (simulation.varied_peak_reserved > out.peak_reserved) {
    m.allocator += simulation.varied_peak_reserved - out.peak_reserved;
    out.peak_reserved = simulation.varied_peak_reserved;
    out.simulated_peak_reserved = simulation.varied_peak_reserved;
    out.band_unknowns.push_back("the lengths and order of the padded batches (" +
                                std::to_string(simulation.varied_length_micro_steps) +
                                " micro-batches replayed, padded to their longest of samples drawn between "
                                "shortest_sample and seq_len)");
  }
  out.simulated_peak_allocated = std::max(out.simulated_peak_allocated, simulation.varied_peak_allocated);
  out.varied_length_micro_steps = simulation.varied_length_micro_steps;
}

// What a run measures apart, as it counts (allocated accounting): the model
// states, and what one micro-batch's forward leaves saved for backward.
MeasurableMemory measurable_memory(const BuiltStep& allocated, const StepProfile& allocated_profile,
                                   const std::vector<BlockChoice>& blocks) {
  MeasurableMemory measurable;
  measurable.parameters = allocated.states.params + allocated.reference_weights;
  measurable.optimizer_states = allocated.states.optimizer;
  measurable.master_weights = allocated.states.master;
  measurable.gradients = allocated.states.grads_full;
  measurable.activations = allocated_profile.persistent;
  for (size_t k = 0; k < blocks.size() && k < allocated_profile.blocks.size(); ++k) {
    switch (blocks[k]) {
      case BlockChoice::kKeep: measurable.activations += allocated_profile.blocks[k].keep; break;
      case BlockChoice::kCheckpoint: measurable.activations += allocated_profile.blocks[k].checkpoint; break;
      case BlockChoice::kOffload: measurable.offloaded_activations += allocated_profile.blocks[k].keep; break;
    }
  }
  return measurable;
}

// Host RAM (per node) and disk, with their budgets.
void host_and_disk(const RunSettings& settings, const ModelStates& states, const StepPeak& peak, Prediction& out) {
  // Paged optimizer states are evicted to host RAM when the GPU runs short: the
  // host must be able to hold them (every rank of the node).
  out.host_ram = kHostBytesPerRank * settings.gpus_per_node + states.host_offload +
                 peak.host_activations * settings.gpus_per_node +
                 states.paged_optimizer * settings.gpus_per_node;
  out.host_ram_budget = settings.host_ram_budget();
  out.host_ram_assumed = !settings.host_ram_bytes;
  out.checkpoint_bytes = states.checkpoint;
  // Kept checkpoints plus the one being written before the oldest is removed.
  out.disk = (settings.checkpoints_kept + 1) * states.checkpoint + states.nvme;
  out.disk_budget = settings.disk_budget();
  out.disk_assumed = !settings.disk_free_bytes;
}

// The step-time model's inputs: per-micro-step compute, recompute and offload
// from the block profile, FSDP2's stream copies, paged migration.
StepTimeInputs step_time_inputs(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                                const BuiltStep& reserved, const std::vector<BlockChoice>& blocks,
                                const Prediction& out) {
  StepTimeInputs times;
  times.seq_len = context.seq_len;
  times.model_flops = reserved.model_flops;
  for (size_t k = 0; k < blocks.size(); ++k) {
    const BlockProfile& block = reserved.model.blocks[k];
    // DPO's reference forward runs the block's forward once more (StepModel::reference_forward).
    const double forward_ms = block.fwd_ms * (reserved.model.reference_forward ? 2 : 1);
    times.micro_fwd_ms += forward_ms;
    const double total = block_ms(reserved.model, static_cast<int>(k), blocks[k]);
    const double recompute = (blocks[k] == BlockChoice::kCheckpoint && block.on_autograd) ? block.recompute_ms : 0;
    const double offload = blocks[k] == BlockChoice::kOffload ? total - forward_ms - block.bwd_ms : 0;
    times.micro_bwd_ms += block.bwd_ms + recompute;
    times.micro_recompute_ms += recompute;
    times.micro_offload_ms += offload;
  }
  const auto copy_ms = [&](int64_t bytes) {
    return stream_copy_ms(static_cast<double>(bytes), context.gpu, context.time_options);
  };
  times.micro_gather_copy_ms = copy_ms(fsdp2_copy_out_bytes(context.graph, settings, config));
  times.reduce_copy_ms = copy_ms(fsdp2_reduce_copy_in_bytes(context.graph, settings, config));
  times.paged_migrated_bytes = static_cast<double>(paged_migrated_bytes(reserved.states.paged_optimizer, out.gpu_capacity,
                                                                        out.gpu_total));
  return times;
}

// Whether the graph copies grouped K and V to every head before attention
// (models/llama.cc rope_attention: the `repeat_kv` copies).
bool copies_grouped_kv(const graph::LayerGraph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(),
                     [](const graph::Node& node) { return node.op == graph::op::kRepeatKv; });
}

}  // namespace

StepProfile step_profile(const ModelContext& context, const RunSettings& settings, int64_t micro_batch,
                         Accounting accounting) {
  return profile_step(context.graph, context.analysis, context.compute_dtype, micro_batch, context.seq_len,
                      accounting, context.gpu, context.time_options, context.checkpoint_saves,
                      grad_bytes_per_element(settings.precision));
}

Prediction predict(const ModelContext& context, const RunSettings& settings,
                   const GlobalConfig& config, const std::vector<BlockChoice>& blocks,
                   bool simulate_allocator) {
  return predict(context, step_profile(context, settings, config.micro_batch, Accounting::kReserved),
                 step_profile(context, settings, config.micro_batch, Accounting::kAllocated), settings, config, blocks,
                 simulate_allocator);
}

Prediction predict(const ModelContext& context, const StepProfile& reserved_profile,
                   const StepProfile& allocated_profile, const RunSettings& settings, const GlobalConfig& config,
                   const std::vector<BlockChoice>& blocks, bool simulate_allocator) {
  Prediction out;
  const BuiltStep reserved = build_step(context, settings, config, reserved_profile, Accounting::kReserved);
  const BuiltStep allocated = build_step(context, settings, config, allocated_profile, Accounting::kAllocated);
  const StepPeak peak = walk_step(reserved.model, blocks, reserved.persistent);
  const StepPeak allocated_peak = walk_step(allocated.model, blocks, allocated.persistent);
  out.peak_reserved = peak.bytes;
  out.peak_allocated = allocated_peak.bytes;

  out.peak = breakdown_at(context, settings, config, reserved, blocks, peak, Accounting::kReserved);
  out.peak_as_allocated =
      breakdown_at(context, settings, config, allocated, blocks, allocated_peak, Accounting::kAllocated);
  out.model = model_size(context.graph, settings.precision);
  if (context.graph.sequence.unit == "tokens") out.model.image_tokens = context.graph.sequence.extra_tokens;
  if (context.graph.family == "t5") out.model.target_tokens = settings.target_tokens.value_or(models::kT5DefaultTargetTokens);
  const Simulation simulation =
      simulate_allocator ? simulate_allocator_share(context, settings, config, blocks, out) : Simulation{};
  const int64_t fixed_length_total = out.peak.total();
  add_varied_lengths(simulation, out);
  out.gpu_total = out.peak.total();
  out.gpu_capacity = context.gpu.memory_bytes;
  out.gpu_budget = gpu_budget_bytes(context, settings);
  out.allocated = measurable_memory(allocated, allocated_profile, blocks);
  out.allocated.activations -= caller_held_bytes(context, config, Accounting::kAllocated);
  out.where.phase = peak.phase;
  out.where.block = peak.block;
  if (peak.block >= 0) out.where.block_name = context.graph.blocks[peak.block].name;
  host_and_disk(settings, reserved.states, peak, out);
  out.time = step_time(settings, config, context.gpu, reserved.states,
                       step_time_inputs(context, settings, config, reserved, blocks, out));
  out.fits_gpu = out.gpu_total <= out.gpu_budget && !simulation.out_of_memory;
  // Widened by with_band() when the stack leaves mechanisms open.
  out.gpu_total_bottom = fixed_length_total;
  out.fits_gpu_bottom = fixed_length_total <= out.gpu_budget &&
                        !(simulation.out_of_memory && !simulation.varied_out_of_memory);
  out.simulated_out_of_memory = simulation.out_of_memory;
  // An assumed budget does not decide: the answer names what the run needs instead.
  out.fits_host = out.host_ram_assumed || out.host_ram <= out.host_ram_budget;
  out.fits_disk = out.disk_assumed || out.disk <= out.disk_budget;
  return out;
}

Prediction with_band(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                     const std::vector<BlockChoice>& blocks, Prediction top) {
  std::optional<RunSettings> bottom_settings = bottom_of_band(settings);
  if (!bottom_settings) return top;
  // Batches at seq_len are the cheap side of varied ones, whose bottom `top` already
  // holds: the stack's bottom need not replay them again.
  bottom_settings->shortest_sample.reset();
  const ResolvedStack stack = resolve_stack(settings);
  std::vector<std::string> stack_unknowns = stack.unknowns;
  // The release's repeat_kv matters where the top's graph copied grouped K/V for SDPA.
  if (stack.repeat_kv_open && copies_grouped_kv(context.graph)) stack_unknowns.emplace_back(repeat_kv_unknown());
  if (stack.layer_rope_caches_open && models::holds_transformers_rope_caches(context.graph)) {
    stack_unknowns.emplace_back(layer_rope_caches_unknown());
  }
  top.band_unknowns.insert(top.band_unknowns.begin(), stack_unknowns.begin(), stack_unknowns.end());
  // The loss variant rewrites the graph, so the bottom gets its own context.
  Result<ModelContext> bottom_context = prepare_context(*bottom_settings);
  const Prediction bottom = predict(bottom_context.is_ok() ? bottom_context.value() : context, *bottom_settings,
                                    config, blocks);
  top.gpu_total_bottom = std::min(bottom.gpu_total_bottom, top.gpu_total_bottom);
  top.fits_gpu_bottom = top.fits_gpu_bottom || bottom.fits_gpu_bottom;
  return top;
}

}  // namespace headroom::planner
