// The step: states, forward, the accumulation loop and the optimizer step.
#include "planner/predict/step_simulator.h"

#include <algorithm>

#include "planner/mechanisms/autocast.h"
#include "planner/mechanisms/input_require_grads.h"
#include "planner/mechanisms/litgpt_model.h"
#include "planner/mechanisms/t5_position_bias.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/predict/ctx_recomputed.h"
#include "planner/predict/dpo_reference.h"
#include "planner/settings/run_gpu.h"
#include "planner/time/fsdp2_stream_copies.h"
#include "planner/time/made_persistent.h"
#include "planner/time/made_persistent_tensors.h"

namespace headroom::planner {

using graph::Node;

namespace {

// The leaves that require grad which the walk holds through the backward of the blocks
// before theirs (ModelContext::ctx_held): the input embeddings' outputs
// (hold_input_grad_leaves) and T5's zero cross-attention biases (hold_t5_bias_leaves).
// Their AccumulateGrad nodes keep them until the graph is freed, after the whole backward
// (torch 2.11 torch/csrc/autograd/functions/accumulate_grad.h, `Variable variable`), not
// their readers' saves. Their gradients need no rule of their own here: the producer's
// backward, which would release them, does not run, so they stay as the leaves' `.grad`.
std::vector<bool> leaves_held_by_graph(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis) {
  std::vector<std::vector<int>> through_backward;
  std::vector<std::vector<int>> checkpoint_saves;
  hold_input_grad_leaves(graph, analysis, through_backward);
  hold_t5_bias_leaves(graph, analysis, checkpoint_saves, through_backward);
  std::vector<bool> held(graph.tensors.size(), false);
  for (const std::vector<int>& leaves : through_backward) {
    for (int t : leaves) held[static_cast<size_t>(t)] = true;
  }
  return held;
}

// Per tensor, its earliest reader's block where it is a made persistent tensor
// (made_persistent.h), -1 otherwise.
std::vector<int> made_first_readers(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                    const std::vector<int64_t>& bytes) {
  std::vector<int> first(graph.tensors.size(), -1);
  const std::vector<int> made = made_persistent_tensors(graph, analysis);
  const std::vector<MadePersistent> spans = made_persistent(graph, analysis, bytes);
  for (size_t i = 0; i < made.size(); ++i) first[static_cast<size_t>(made[i])] = spans[i].first_reader;
  return first;
}

}  // namespace

StepSimulator::StepSimulator(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
              const std::vector<BlockChoice>& choices, const SimulatorOptions& options)
    : ctx_(context), graph_(context.graph), an_(context.analysis), settings_(settings), config_(config),
      choices_(choices), options_(options), allocator_(allocator_budget(context, settings), uses_expandable_segments(settings)) {
  batch_ = config.micro_batch;
  seq_ = context.seq_len;
  const size_t tensors = graph_.tensors.size();
  tensor_bytes_.resize(tensors);
  for (size_t t = 0; t < tensors; ++t) {
    tensor_bytes_[t] = graph::tensor_bytes(graph_.tensors[t], context.compute_dtype, batch_, seq_);
  }
  handle_.assign(tensors, -1);
  grad_handle_.assign(tensors, -1);
  pending_.assign(tensors, 0);
  saved_.assign(tensors, 0);
  held_by_checkpoint_.assign(tensors, 0);
  read_by_later_block_ = read_by_later_block(graph_, an_);
  make_backward_gradients();
  cached_casts_ = autocast_cached_casts(graph_);
  inputs_on_host_.assign(graph_.blocks.size(), false);
  times_.resize(graph_.nodes.size());
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    times_[n] = node_times(graph_, an_, static_cast<int>(n), context.compute_dtype, batch_, seq_,
                           context.gpu, context.time_options);
  }
  states_ = model_states(graph_, settings, config, Accounting::kAllocated);
  if (!options.lazy_optimizer_states) states_.states_created_lazily = false;
  std::map<std::string, int> uses;
  for (const Node& node : graph_.nodes) {
    for (const graph::Param& param : node.params) {
      ++uses[param.tied_to.empty() ? param.name : param.tied_to];
      if (param.tied_to.empty()) owners_[param.name] = &param;
    }
  }
  for (const auto& [owner, count] : uses) {
    if (count > 1 && owners_.count(owner)) shared_uses_[owner] = count;
  }
  block_param_bytes_ = block_gathered_bytes(graph_, settings);
  block_shard_bytes_ = block_shard_bytes(graph_, settings, config.zero_stage);
  deepspeed_gathered_ = zero3_gathered_bytes(context, settings, config);
  plan_deepspeed_hooks();
  if (fsdp() && !fsdp1()) kept_layer_ = fsdp2_kept_layer(graph_, settings);
  if (fsdp() && !fsdp1()) kept_tail_ = fsdp2_kept_tail(graph_, settings);
  const StackSpec stack = resolve_stack(settings).top;
  grads_through_forward_ = stack.grads_through_forward;
  reentrant_recompute_ = stack.recompute == Recompute::kBlockReentrant;
  ctx_copies_.resize(graph_.blocks.size());
  ctx_recomputed_.resize(graph_.blocks.size());
  if (!reentrant_recompute_) {
    for (size_t b = 0; b < graph_.blocks.size(); ++b) ctx_recomputed_[b] = ctx_recomputed_tensors(context, b);
  }
  unsloth_offload_ = unsloth_offloads_checkpoint_inputs(settings);
  held_by_graph_ = leaves_held_by_graph(graph_, an_);
  // The persistent tensors the forward makes live from their producer's forward to their
  // earliest reader's backward, as the walk prices them (made_persistent.h), where the
  // stack lets go of them (made_tables_released).
  made_first_reader_ = made_first_readers(graph_, an_, tensor_bytes_);
  if (!made_tables_released(settings.stack, reentrant_recompute_)) made_first_reader_.assign(tensors, -1);
  for (size_t b = 0; b < graph_.blocks.size(); ++b) {
    if (checkpointed(static_cast<int>(b))) last_checkpointed_ = static_cast<int>(b);
  }
}

void StepSimulator::make_backward_gradients() {
  backward_grads_ = std::make_unique<const BackwardGradients>(graph_, an_, tensor_bytes_, read_by_later_block_,
                                                              ctx_.compute_dtype, batch_, seq_, Accounting::kAllocated,
                                                              grad_bytes_per_element(settings_.precision));
}

void StepSimulator::allocate_states() {
  label_ = "model states";
  const bool progressive = states_.grads_progressive;
  if (config_.offload_param == Offload::kNone) {
    if (config_.zero_stage >= 3 || fsdp()) {
      alloc(states_.params, "parameters");
    } else {
      for (const Node& node : graph_.nodes) {
        for (const graph::Param& param : node.params) {
          if (!param.tied_to.empty()) continue;
          alloc(param_storage_bytes(param, settings_.precision), kept_gradient(param) ? "gradients" : "parameters");
        }
      }
    }
  }
  // States made at the first step() are allocated there (optimizer_step); what
  // else the optimizer holds (bitsandbytes' quantization maps) is here from the start.
  int64_t lazy_bytes = 0;
  if (states_.states_created_lazily) {
    for (int64_t tensor : states_.state_tensors) lazy_bytes += allocated_bytes_for_request(tensor);
  }
  if (states_.optimizer > lazy_bytes) alloc(states_.optimizer - lazy_bytes, "optimizer states");
  if (states_.master > 0) alloc(states_.master, "master weights");
  // FSDP's sharded gradients are made by each unit's reduce-scatter (make_sharded_grad).
  // ZeRO-2's hooks make the partition in backward (make_partition).
  if (!progressive && states_.grads_full > 0 && states_.sharded_block_grads.empty() && !zero2_hooks_) {
    alloc(states_.grads_full, "gradients");
  }
  if (states_.comm_buckets > 0) alloc(states_.comm_buckets, "ZeRO buffers");
  const int64_t reference = reference_weight_bytes(ctx_, settings_, Accounting::kAllocated);
  if (reference > 0) alloc(reference, "reference model");
  alloc(ctx_.gpu.cublas_workspace_bytes, "workspaces");
  for (size_t t = 0; t < graph_.tensors.size(); ++t) {
    if (an_.persistent[t] && made_first_reader_[t] < 0) handle_[t] = alloc(tensor_bytes_[t], "persistent activations");
  }
  // Unsloth's two GPU buffers the offloaded inputs come back into, sized to the largest
  // and kept from step to step, as the step walk prices them (step_model.cc
  // unsloth_offload_inputs).
  int64_t largest_input = 0;
  for (size_t b = 0; b < graph_.blocks.size(); ++b) {
    if (sends_inputs_to_host(static_cast<int>(b))) largest_input = std::max(largest_input, checkpoint_input_bytes(static_cast<int>(b)));
  }
  if (largest_input > 0) alloc(2 * largest_input, "checkpoint input buffers");
}

// Node n has run: its inputs and what it held (Node::holds) lose a pending read
// (in a recompute, only those made in this block were counted), and its outputs
// nobody reads go.
void StepSimulator::release_reads(int n, int block, bool recompute) {
  std::vector<int> reads = an_.node_inputs[n];
  reads.insert(reads.end(), an_.node_holds[n].begin(), an_.node_holds[n].end());
  for (int t : reads) {
    if (!recompute || an_.producer[t] < 0 || graph_.nodes[an_.producer[t]].block == block) {
      if (pending_[t] > 0) --pending_[t];
    }
    maybe_free(t);
  }
  for (int t : an_.node_outputs[n]) maybe_free(t);
}

void StepSimulator::forward_block(int block, bool recompute) {
  const bool saving = !no_grad_ && (!checkpointed(block) || recompute);
  const std::string prefix = no_grad_ ? "reference forward " : recompute ? "recompute " : "forward ";
  const int64_t gathered = recompute ? -1 : gather(block, block + 1);
  if (checkpointed(block) && !recompute && !no_grad_) {
    for (int n : an_.blocks[block].nodes) {
      for (int t : an_.node_outputs[n]) {
        if (cached_casts_[t]) {
          ++held_by_checkpoint_[t];
          held_by_cast_cache_.push_back(t);
        }
      }
    }
    for (int t : an_.blocks[block].boundary_inputs) ++held_by_checkpoint_[t];
    for (int t : selective_saves(block)) ++held_by_checkpoint_[t];
    if (settings_.offload_checkpoint_inputs) stash_checkpoint_inputs(block);
    if (sends_inputs_to_host(block)) send_inputs_to_host(block);
  }
  for (int n : an_.blocks[block].nodes) {
    const Node& node = graph_.nodes[n];
    label_ = prefix + node.name;
    if (recompute) copy_ctx_tensors(n, block);
    for (int t : an_.node_outputs[n]) {
      if ((an_.persistent[t] && made_first_reader_[t] < 0) || handle_[t] >= 0) continue;
      handle_[t] = alloc(tensor_bytes_[t], an_.persistent[t] ? category("persistent activations") : block_category(block));
      pending_[t] = 0;
      for (int consumer : an_.consumers[t]) {
        // In a recompute only this block's consumers run again.
        if (!recompute || graph_.nodes[consumer].block == block) ++pending_[t];
      }
      for (int holder : an_.holders[t]) {
        if (!recompute || graph_.nodes[holder].block == block) ++pending_[t];
      }
      if (held_by_graph_[t] && !recompute && !no_grad_) ++held_by_checkpoint_[t];
    }
    // Selective AC hands a saved op's output back from its cache: no kernel runs.
    const bool cached = recompute && std::any_of(an_.node_outputs[n].begin(), an_.node_outputs[n].end(), [&](int t) {
      const std::vector<int>& saves = selective_saves(block);
      return std::find(saves.begin(), saves.end(), t) != saves.end();
    });
    const int64_t workspace = cached ? 0 : node.workspace_elements.at(batch_, seq_);
    const int64_t ws = workspace > 0 ? alloc(graph::dtype_bytes(ctx_.compute_dtype, workspace), "transient") : -1;
    if (!cached) {
      compute(recompute ? Phase::kRecompute : Phase::kForward, times_[n].fwd_ms, block, label_, times_[n].fwd_flops);
    }
    release(ws);
    if (saving) {
      for (int t : an_.node_saves[n]) ++saved_[t];
    }
    release_reads(n, block, recompute);
  }
  if (gathered >= 0 && keeps_unsharded(block) && !recompute) {
    kept_unsharded_[block] = gathered;
  } else if (gathered >= 0) {
    release(gathered);
  }
  if (tail_copy_in_ >= 0 && block == kept_tail_) {
    release(tail_copy_in_);
    tail_copy_in_ = -1;
  }
}

void StepSimulator::reference_forward() {
  no_grad_ = true;
  for (int b = 0; b < static_cast<int>(graph_.blocks.size()); ++b) forward_block(b, false);
  release_made_tables(-1);
  no_grad_ = false;
}

void StepSimulator::micro_step() {
  const int blocks = static_cast<int>(graph_.blocks.size());
  gather_root();
  if (dpo_reference_forward(settings_)) reference_forward();
  for (int b = 0; b < blocks; ++b) {
    forward_block(b, false);
    if (offloaded(b)) offload_block(b);
  }
  // The forward's autocast region ends: its cache lets go of the weight casts.
  for (int t : held_by_cast_cache_) {
    --held_by_checkpoint_[t];
    maybe_free(t);
  }
  held_by_cast_cache_.clear();
  // Backward drops whatever the forward stash still holds on the GPU.
  trim_input_stash(0);
  restage_root();
  label_ = "zero_grad";
  for (int64_t handle : held_grads_) release(handle);  // the previous step's, freed before backward()
  held_grads_.clear();
  in_backward_ = true;
  for (int b = blocks - 1; b >= 0; --b) backward_block(b);
  in_backward_ = false;
  deepspeed_backward_done();
  release(backward_buckets_);  // independent_gradient_partition_epilogue
  backward_buckets_ = -1;
  reshard_root();
  for (int64_t handle : offload_shards_) release(handle);  // no root: the last unit's callback
  offload_shards_.clear();
  settle(1e300);
  // A shared weight whose last use never ran backward still has its gradient.
  for (const auto& [owner, handle] : shared_grads_) param_grads_.push_back(handle);
  shared_grads_.clear();
  seen_uses_.clear();
  // Whatever is still held (graph outputs nobody consumes) goes with the step.
  for (size_t t = 0; t < graph_.tensors.size(); ++t) {
    release(grad_handle_[t]);
    grad_handle_[t] = -1;
    if (an_.persistent[t]) continue;
    pending_[t] = 0;
    saved_[t] = 0;
    held_by_checkpoint_[t] = 0;
    maybe_free(static_cast<int>(t));
  }
  prefetch_done_.clear();
  for (const auto& [block, buffer] : all_gather_buffers_) release(buffer);
  all_gather_buffers_.clear();
  for (const auto& [block, handle] : kept_unsharded_) release(handle);
  kept_unsharded_.clear();
}

void StepSimulator::optimizer_step() {
  // The optimizer's own duration comes from the step-time model (GPU: memory
  // bound; CPU Adam and the parameter copy back when offloaded).
  const TimeBreakdown model = step_time(settings_, config_, ctx_.gpu, states_, StepTimeInputs{});
  label_ = "optimizer step";
  const double collectives_done = std::max(comm_free_, copy_out_free_);
  if (collectives_done > clock_) {
    time_.comm_exposed_ms += comm_free_ > clock_ ? comm_free_ - clock_ : 0;
    clock_ = std::max(clock_, collectives_done);
  }
  const Stream stream = config_.offload_optimizer == Offload::kNone ? Stream::kCompute : Stream::kCpu;
  // A lazy optimizer makes its states now, one tensor at a time, in the blocks the
  // freed activations left cached (model_states.h, states_created_lazily).
  if (states_.states_created_lazily && !lazy_states_made_) {
    for (int64_t tensor : states_.state_tensors) alloc(tensor, "optimizer states");
    lazy_states_made_ = true;
  }
  // foreach AdamW's temporary list lives for the step (planner/memory/optimizer_step.h),
  // one tensor per state where the states are tensors of their own.
  std::vector<int64_t> step_temporaries;
  int64_t listed = 0;
  for (int64_t tensor : states_.step_transient_tensors) {
    step_temporaries.push_back(alloc(tensor, "transient"));
    listed += allocated_bytes_for_request(tensor);
  }
  if (states_.step_transient > listed) step_temporaries.push_back(alloc(states_.step_transient - listed, "transient"));
  clock_ = event(stream, Phase::kOptimizer, clock_, model.optimizer_ms, -1, label_);
  for (int64_t handle : step_temporaries) release(handle);
  time_.optimizer_ms = model.optimizer_ms;
  if (grads_through_forward_) {
    // zero_grad runs between the next loss and its backward (micro_step).
    held_grads_.insert(held_grads_.end(), param_grads_.begin(), param_grads_.end());
  } else {
    for (int64_t handle : param_grads_) release(handle);  // zero_grad(set_to_none=True)
  }
  param_grads_.clear();
  sharded_made_.clear();
  if (partition_ >= 0) drop_partition();
}

// The micro-steps of one optimizer step. Only the first (it allocates
// progressive gradients) and the last (its gradient collectives and host
// copies) differ from the rest; the ones between start from the same state
// and do the same work. So with more than kReplayed + 1 micro-steps, steps 0,
// 1 and 2 are replayed, the identical steps 3 .. n-2 are not: the clock, each
// stream's free time and the exposed-time and allocation counters advance by
// what step 2 added (a stream that drifts behind keeps drifting), and the last
// step is replayed. Issue 14: 10^6 accumulation steps were walked one by one
// (minutes); the answer is the same (tests/planner/simulator_test.cc).
void StepSimulator::accumulation_loop() {
  constexpr int64_t kReplayed = 3;
  const int64_t steps = config_.grad_accum;
  if (options_.replay_every_micro_step || steps <= kReplayed + 1) {
    for (micro_ = 0; micro_ < steps; ++micro_) micro_step();
    micro_ = static_cast<int>(steps) - 1;
    return;
  }
  for (micro_ = 0; micro_ < kReplayed - 1; ++micro_) micro_step();
  struct Counters {
    double clock, comm_free, copy_out_free, copy_in_free, offload_exposed, comm_exposed;
    int64_t allocations;
    std::map<Phase, double> phases;
  };
  const auto counters = [&] {
    return Counters{clock_, comm_free_, copy_out_free_, copy_in_free_, time_.offload_exposed_ms,
                    time_.comm_exposed_ms, out_.allocations, compute_phase_ms_};
  };
  const Counters before = counters();
  micro_step();  // micro_ == kReplayed - 1: a representative middle step
  const Counters after = counters();
  const auto skipped = static_cast<double>(steps - kReplayed - 1);
  clock_ += skipped * (after.clock - before.clock);
  comm_free_ += skipped * (after.comm_free - before.comm_free);
  copy_out_free_ += skipped * (after.copy_out_free - before.copy_out_free);
  copy_in_free_ += skipped * (after.copy_in_free - before.copy_in_free);
  time_.offload_exposed_ms += skipped * (after.offload_exposed - before.offload_exposed);
  time_.comm_exposed_ms += skipped * (after.comm_exposed - before.comm_exposed);
  out_.allocations += static_cast<int64_t>(skipped) * (after.allocations - before.allocations);
  for (const auto& [phase, ms] : after.phases) {
    const auto was = before.phases.find(phase);
    compute_phase_ms_[phase] += skipped * (ms - (was == before.phases.end() ? 0.0 : was->second));
  }
  micro_ = static_cast<int>(steps) - 1;
  micro_step();
}

// Starts another optimizer step: the allocator keeps what the last one left
// (cached segments, the optimizer's states); the timeline, the memory curve, the
// time breakdown and the peak restart, so they describe the step replayed last.
void StepSimulator::begin_next_step() {
  const double shift = clock_;
  clock_ = 0;
  copy_out_free_ = std::max(0.0, copy_out_free_ - shift);
  copy_in_free_ = std::max(0.0, copy_in_free_ - shift);
  comm_free_ = std::max(0.0, comm_free_ - shift);
  out_.events.clear();
  samples_.clear();
  labels_.clear();
  compute_phase_ms_.clear();
  time_ = TimeBreakdown{};
  out_.allocations = 0;
  label_ = "step " + std::to_string(out_.steps_simulated + 1);
  out_.peak_allocated = 0;
  out_.peak_reserved = 0;
  sample();
}

Simulation StepSimulator::run() {
  allocate_states();
  accumulation_loop();
  optimizer_step();
  out_.steps_simulated = 1;
  out_.first_step_peak_allocated = out_.peak_allocated;
  out_.first_step_peak_reserved = out_.peak_reserved;
  // Lazily made states change what later steps find cached: replay steps until
  // one reserves nothing new (the steady state), at most kMaxSteps.
  constexpr int kMaxSteps = 4;
  while (states_.states_created_lazily && out_.steps_simulated < kMaxSteps) {
    const int64_t reserved_before = allocator_.reserved_bytes();
    begin_next_step();
    accumulation_loop();
    optimizer_step();
    ++out_.steps_simulated;
    out_.reserved_still_growing = allocator_.reserved_bytes() != reserved_before;
    if (!out_.reserved_still_growing) break;
  }
  time_.forward_ms = compute_phase_ms_[Phase::kForward];
  time_.backward_ms = compute_phase_ms_[Phase::kBackward];
  time_.recompute_ms = compute_phase_ms_[Phase::kRecompute];
  time_.step_ms = clock_;
  const int world = settings_.world_size();
  const double samples = static_cast<double>(config_.grad_accum * config_.micro_batch * world);
  time_.samples_per_s = clock_ > 0 ? samples / (clock_ / 1e3) : 0;
  time_.tokens_per_s = time_.samples_per_s * static_cast<double>(seq_);
  double flops = 0;
  for (const NodeTimes& t : times_) flops += t.fwd_flops + t.bwd_flops;
  const double peak = (settings_.precision == Precision::kFp32 ? ctx_.gpu.fp32_tflops
                                                           : tensor16_tflops(ctx_.gpu, settings_.precision)) * 1e12;
  time_.mfu = clock_ > 0 ? flops * static_cast<double>(config_.grad_accum) / (clock_ / 1e3) / peak : 0;
  thin_samples();
  out_.time = time_;
  out_.cuda_context = context_bytes(ctx_, settings_);
  for (size_t id = 0; id < peak_categories_.size(); ++id) {
    if (peak_categories_[id] > 0) out_.live_at_peak.push_back({category_names_[id], peak_categories_[id]});
  }
  std::stable_sort(out_.live_at_peak.begin(), out_.live_at_peak.end(),
                   [](const LiveItem& a, const LiveItem& b) { return a.bytes > b.bytes; });
  return std::move(out_);
}

}  // namespace headroom::planner
