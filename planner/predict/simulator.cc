#include "planner/predict/simulator.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

#include "planner/mechanisms/autocast.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/caching_allocator.h"
#include "planner/settings/stack.h"
#include "planner/time/fsdp2_stream_copies.h"
#include "planner/predict/step_builder.h"
#include "planner/time/step_time.h"

namespace headroom::planner {
namespace {

using graph::Node;

// Everything one simulated step needs, and its running state.
class StepSimulator {
 public:
  StepSimulator(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
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
    if (fsdp() && !fsdp1()) kept_layer_ = fsdp2_kept_layer(graph_, settings);
  }

  Simulation run();
  // A run of batches of varied length from its first step (replay_varied_lengths).
  Simulation run_varied_lengths();

 private:
  // --- allocation bookkeeping ---
  // Categories are small integers; names_[id] is what the report shows.
  int category(const std::string& name) {
    const auto [it, inserted] = category_ids_.try_emplace(name, static_cast<int>(category_names_.size()));
    if (inserted) {
      category_names_.push_back(name);
      by_category_.push_back(0);
    }
    return it->second;
  }
  int block_category(int block) {
    if (block_categories_.empty()) {
      for (const graph::Block& b : graph_.blocks) block_categories_.push_back(category("activations: " + b.name));
    }
    return block_categories_[block];
  }
  int64_t alloc(int64_t bytes, const std::string& name, int stream = 0) {
    return alloc(bytes, category(name), stream);
  }
  int64_t alloc(int64_t bytes, int category, int stream = 0) {
    int64_t handle = allocator_.allocate(bytes, stream);
    if (handle < 0) {
      if (!out_.out_of_memory) {
        out_.out_of_memory = true;
        out_.out_of_memory_at = label_;
        if (replaying_lengths_) {
          out_.varied_out_of_memory = true;
          out_.out_of_memory_at += " (a batch of " + std::to_string(seq_) + " tokens)";
        }
      }
      allocator_.set_capacity(INT64_MAX / 4);
      handle = allocator_.allocate(bytes, stream);
    }
    const int64_t size = allocated_bytes_for_request(bytes);
    live_[handle] = {size, category};
    by_category_[category] += size;
    if (!replaying_lengths_) ++out_.allocations;
    sample();
    return handle;
  }
  void release(int64_t handle) {
    if (handle < 0) return;
    const auto it = live_.find(handle);
    by_category_[it->second.second] -= it->second.first;
    live_.erase(it);
    allocator_.release(handle);
    sample();
  }
  void sample() {
    const int64_t reserved = allocator_.reserved_bytes();
    const int64_t allocated = allocator_.allocated_bytes();
    if (replaying_lengths_) {  // batches of varied length: their peaks only
      out_.varied_peak_reserved = std::max(out_.varied_peak_reserved, reserved);
      out_.varied_peak_allocated = std::max(out_.varied_peak_allocated, allocated);
      return;
    }
    if (options_.max_memory_samples > 0) {
      if (labels_.empty() || labels_.back() != label_) labels_.push_back(label_);
      samples_.push_back({clock_, allocated, reserved, static_cast<int>(labels_.size()) - 1});
    }
    out_.peak_reserved = std::max(out_.peak_reserved, reserved);
    // Reserved memory only grows (the allocator caches), so the moment worth
    // explaining is the allocation peak: what is live then, and at which op.
    if (allocated > out_.peak_allocated) {
      out_.peak_allocated = allocated;
      out_.peak_time_ms = clock_;
      out_.peak_label = label_;
      out_.segments_at_peak = allocator_.segment_count();
      peak_categories_ = by_category_;
    }
  }
  void maybe_free(int t) {
    if (handle_[t] < 0 || an_.persistent[t] || pending_[t] > 0 || saved_[t] > 0 || held_by_checkpoint_[t] > 0) return;
    release(handle_[t]);
    handle_[t] = -1;
  }
  // Frees whose copies finished by now (offloaded activations leaving the GPU).
  void settle(double until) {
    while (!delayed_.empty() && delayed_.top().first <= until) {
      const int t = delayed_.top().second;
      delayed_.pop();
      --saved_[t];
      maybe_free(t);
    }
  }
  double event(Stream stream, Phase phase, double start, double duration, int block, const std::string& label,
               int64_t bytes = 0, double flops = 0) {
    if (replaying_lengths_) return start + duration;  // the timeline is the step at seq_len
    if (options_.record_events) {
      out_.events.push_back({stream, phase, start, start + duration, micro_, block, label, bytes, flops});
    }
    if (stream == Stream::kCompute) compute_phase_ms_[phase] += duration;
    return start + duration;
  }
  void compute(Phase phase, double ms, int block, const std::string& label, double flops) {
    label_ = label;
    clock_ = event(Stream::kCompute, phase, clock_, ms, block, label, 0, flops);
    settle(clock_);
  }
  double transfer_ms(double bytes) const { return planner::transfer_ms(bytes, ctx_.gpu.host_link_gbps); }
  const std::string& block_name(int block) const { return graph_.blocks[block].name; }
  bool checkpointed(int block) const { return choices_[block] == BlockChoice::kCheckpoint && an_.blocks[block].on_autograd; }
  const std::vector<int>& selective_saves(int block) const {
    static const std::vector<int> kNone;
    return static_cast<size_t>(block) < ctx_.checkpoint_saves.size() ? ctx_.checkpoint_saves[block] : kNone;
  }
  // ZeRO-3 all-gathers the block about to compute. FSDP2 all-gathers into a
  // buffer allocated on its all-gather copy-in stream (foreach_all_gather,
  // torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py), copies it out
  // into the unsharded parameters on the compute stream
  // (foreach_all_gather_copy_out) and drops it; the next block's (`ahead`)
  // buffer is prefetched while this one computes. The copy-in stream caches
  // its own blocks (planner/memory/caching_allocator.h). FSDP1 all-gathers on its
  // unshard stream straight into the unit's padded unsharded FlatParameter
  // (torch/distributed/fsdp/_flat_param.py FlatParamHandle.unshard,
  // _all_gather_flat_param), which is what the unit computes with, and
  // prefetches the next unit's the same way.
  int64_t gather(int block, int ahead) {
    if (!fsdp() && config_.zero_stage < 3) return -1;
    if (!fsdp()) return alloc(block_param_bytes_[block], "ZeRO buffers");
    int64_t unsharded = -1;  // the root group is gathered for the whole micro-step (gather_root)
    if (const auto kept = kept_unsharded_.find(block); kept != kept_unsharded_.end()) {
      unsharded = kept->second;  // not resharded after its forward
      kept_unsharded_.erase(kept);
    } else if (!in_root_group(block)) {
      const auto prefetched = all_gather_buffers_.find(block);
      int64_t copy_in = -1;
      if (prefetched != all_gather_buffers_.end()) {
        copy_in = prefetched->second;
        all_gather_buffers_.erase(prefetched);
      } else {
        copy_in = all_gather_buffer(block);
      }
      if (fsdp1()) {
        unsharded = copy_in;
      } else {
        unsharded = alloc(block_param_bytes_[block], "ZeRO buffers");
        copy_out_gathered(block, block_param_bytes_[block], "all-gather copy-out " + block_name(block));
        release(copy_in);
      }
    }
    const bool in_range =
        ahead >= 0 && static_cast<size_t>(ahead) < block_param_bytes_.size() && !in_root_group(ahead) &&
        !kept_unsharded_.count(ahead);
    if (in_range && !all_gather_buffers_.count(ahead)) all_gather_buffers_[ahead] = all_gather_buffer(ahead);
    return unsharded;
  }
  // FSDP2's all-gather buffer for `block` on the copy-in stream. Under CPU offload
  // each shard is first copied to the GPU in its stored dtype (all_gather_inputs:
  // .to(device); fp32 shards under mixed precision) and cast to the gathered dtype
  // when that differs (the 16-bit param dtype, or fp8 with the float8 all-gather);
  // those copies are dropped once foreach_all_gather has copied them into the buffer.
  // FSDP1's CPUOffload stages the same way: pre_unshard copies the fp32 shard in
  // (flat_param_to, or .to(device) inside _use_low_precision_shard) and casts it
  // into _mp_shard under mixed precision (torch/distributed/fsdp/_flat_param.py).
  int64_t all_gather_buffer(int block) {
    const int64_t copies = offload_staging_bytes(block_shard_bytes_[block], block_param_bytes_[block]);
    const int64_t staged = copies > 0 ? alloc(copies, "ZeRO buffers", kAllGatherStream) : -1;
    const int64_t buffer = alloc(block_param_bytes_[block], "ZeRO buffers", kAllGatherStream);
    if (staged >= 0) release(staged);
    return buffer;
  }
  // Bytes of one rank's shard copies on the GPU before the all-gather of parameters
  // whose shards hold `shard_bytes` (fp32 under mixed precision) and gathered in
  // `gathered`: the shard in its dtype, and its cast when that differs.
  int64_t offload_staging_bytes(int64_t shard_bytes, int64_t gathered_bytes) const {
    if (!fsdp_cpu_offload(settings_, config_)) return 0;
    const int64_t group = settings_.shard_group_size();
    const auto per_rank = [&](int64_t bytes) { return (bytes + group - 1) / group; };
    const int64_t stored = per_rank(shard_bytes);
    const int64_t gathered = per_rank(gathered_bytes);
    return stored + (shard_bytes != gathered_bytes ? gathered : 0);
  }
  // The root group's bytes as stored and as gathered.
  std::pair<int64_t, int64_t> root_group_bytes() const {
    int64_t stored = 0, gathered = 0;
    for (size_t b = 0; b < graph_.blocks.size(); ++b) {
      if (!in_root_group(static_cast<int>(b))) continue;
      stored += block_shard_bytes_[b];
      gathered += block_param_bytes_[b];
    }
    return {stored, gathered};
  }
  std::vector<int> root_blocks() const {
    std::vector<int> blocks;
    for (size_t b = 0; b < graph_.blocks.size(); ++b) {
      if (in_root_group(static_cast<int>(b))) blocks.push_back(static_cast<int>(b));
    }
    return blocks;
  }
  // The root's shard copied in and cast again at its pre-backward, then dropped
  // (fsdp_restages_root).
  void restage_root() {
    if (!fsdp() || root_params_ < 0 || !fsdp_restages_root(settings_, config_.zero_stage)) return;
    const auto [stored, gathered] = root_group_bytes();
    const int64_t copies = offload_staging_bytes(stored, gathered);
    if (copies == 0) return;
    label_ = "copy in root shard for backward";
    release(alloc(copies, "ZeRO buffers", kAllGatherStream));
  }
  static constexpr int kAllGatherStream = 1;
  static constexpr int kReduceScatterStream = 2;
  bool fsdp() const { return fsdp_shards_params(settings_, config_.zero_stage); }
  // Whether `block` keeps its unsharded parameters from its forward to its backward:
  // FSDP at ZeRO-2 (fsdp_keeps_unsharded), or the layer the stack leaves unsharded.
  bool keeps_unsharded(int block) const {
    return block == kept_layer_ || (fsdp_keeps_unsharded(settings_, config_.zero_stage) && !in_root_group(block));
  }
  bool fsdp1() const { return fsdp() && sharding_of(settings_) == Sharding::kFsdp1; }
  bool in_root_group(int block) const { return fsdp() && in_fsdp2_root(graph_.blocks[block], settings_); }
  // FSDP2's root group: one all-gather at the root's pre-forward, through a buffer
  // on the all-gather stream, into unsharded parameters that stay until the end
  // of backward (planner/memory/model_states.h, fsdp2_root_params).
  void gather_root() {
    const auto [stored, bytes] = root_group_bytes();
    if (bytes == 0) return;
    label_ = "all-gather root group";
    if (fsdp1()) {
      const int64_t copies = offload_staging_bytes(stored, bytes);
      const int64_t staged = copies > 0 ? alloc(copies, "ZeRO buffers", kAllGatherStream) : -1;
      root_params_ = alloc(bytes, "ZeRO buffers", kAllGatherStream);
      if (staged >= 0) release(staged);
      return;
    }
    const int64_t copy_in = alloc(bytes, "ZeRO buffers", kAllGatherStream);
    root_params_ = alloc(bytes, "ZeRO buffers");
    copy_out_gathered(-1, bytes, "all-gather copy-out root group");
    release(copy_in);
  }
  // FSDP2's copies on the compute stream (planner/time/fsdp2_stream_copies.h), exposed:
  // each all-gather copied out into the unsharded parameters (`bytes` read and
  // written), and the gradients copied into each reduce-scatter input.
  void copy_out_gathered(int block, int64_t bytes, const std::string& label) {
    stream_copy(block, 2 * bytes, label);
  }
  void copy_in_gradients(const std::vector<int>& blocks, const std::string& label) {
    int64_t bytes = 0;
    for (int block : blocks) {
      for (int n : an_.blocks[block].nodes) {
        for (const graph::Param& param : graph_.nodes[n].params) {
          if (param.trainable && param.tied_to.empty()) bytes += reduce_copy_in_bytes(param, settings_);
        }
      }
    }
    if (bytes > 0) stream_copy(blocks.size() == 1 ? blocks[0] : -1, bytes, label);
  }
  void stream_copy(int block, int64_t bytes, const std::string& label) {
    const double ms = stream_copy_ms(static_cast<double>(bytes), ctx_.gpu, ctx_.time_options);
    clock_ = event(Stream::kCompute, Phase::kComm, clock_, ms, block, label, bytes);
    time_.comm_exposed_ms += ms;
    settle(clock_);
  }
  // The root's post-backward in the final callback: its reduce-scatter input
  // beside its unsharded gradients, then all of it and the parameters are freed.
  void reshard_root() {
    if (root_params_ < 0) return;
    label_ = "reduce-scatter root group";
    if (!root_grads_.empty()) {
      const int64_t buffers = alloc(states_.fsdp2_root_reduce_scatter, "ZeRO buffers");
      if (!fsdp1()) copy_in_gradients(root_blocks(), "reduce-scatter copy-in root group");
      if (states_.root_offload_grad_shard > 0) offload_shards_.push_back(alloc(states_.root_offload_grad_shard, "gradients"));
      release(buffers);
    }
    for (int64_t handle : root_grads_) release(handle);
    if (!root_grads_.empty()) make_sharded_grad(-1);
    root_grads_.clear();
    if (micro_ + 1 == config_.grad_accum) {  // the root's held gradient went into this reduce
      release(root_unsynced_);
      root_unsynced_ = -1;
    }
    release(root_params_);
    root_params_ = -1;
    // FSDP1 offload: _post_backward_final_callback waits for the copies to the
    // host, then _finalize_params drops every _saved_grad_shard.
    label_ = "gradients to host";
    for (int64_t handle : offload_shards_) release(handle);
    offload_shards_.clear();
  }
  // A unit's sharded gradient, made by its first reduce-scatter of the step and
  // accumulated into by the next ones, lives until zero_grad frees it
  // (ModelStates::sharded_block_grads; block -1 is the root's).
  void make_sharded_grad(int block) {
    if (states_.sharded_block_grads.empty() || !sharded_made_.insert(block).second) return;
    const int64_t bytes = block < 0 ? states_.root_sharded_grads : states_.sharded_block_grads[block];
    if (bytes <= 0) return;
    // Made on the reduce-scatter stream (FSDP2: foreach_reduce allocates reduce_output
    // and casts it under reduce_scatter_stream; FSDP1: _post_backward_hook runs
    // _reduce_grad under _post_backward_stream), so its freed blocks stay cached
    // for that stream, out of reach of the next step's activations.
    const int64_t handle = alloc(bytes, "gradients", kReduceScatterStream);
    // Optimizer in backward: the parameter's hook steps and frees it at once.
    if (states_.grads_in_backward) release(handle); else param_grads_.push_back(handle);
  }
  int64_t grad_bytes_of_block(int block) const {
    int64_t bytes = 0;
    for (int n : an_.blocks[block].nodes) {
      for (const graph::Param& param : graph_.nodes[n].params) {
        if (param.trainable && param.tied_to.empty()) bytes += planner::grad_bytes(param, settings_.precision);
      }
    }
    return bytes;
  }
  bool offloaded(int block) const { return choices_[block] == BlockChoice::kOffload && an_.blocks[block].on_autograd; }

  void allocate_states();
  void thin_samples();
  void forward_block(int block, bool recompute);
  void release_reads(int n, int block, bool recompute);
  void stash_checkpoint_inputs(int block);
  void evict_checkpoint_inputs(int block);
  // Evicts the oldest stashed checkpoint inputs until at most `keep` stay on the GPU.
  void trim_input_stash(size_t keep) {
    while (input_stash_.size() > keep) {
      evict_checkpoint_inputs(input_stash_.front());
      input_stash_.pop_front();
    }
  }
  void fetch_checkpoint_inputs(int block);
  void offload_block(int block);
  void prefetch_block(int block);
  void backward_block(int block);
  // backward_block's steps (simulator.cc, in the order it runs them).
  struct ParamGradWork {
    std::vector<int64_t> partials;     // later uses of a shared weight: their partial gradients
    std::vector<std::string> finished;  // shared weights whose last use in backward this is
  };
  void wait_for_offloaded(int block);
  ParamGradWork start_param_grads(const Node& node);
  void finish_param_grads(const ParamGradWork& work, size_t grads_before);
  void backward_node(int n, int block);
  void release_checkpoint_holds(int block);
  bool reduce_block_gradients(int block);
  void gradient_traffic(int block, bool syncing);
  void micro_step();
  void set_length(int64_t seq);
  void replay_varied_lengths();
  void accumulation_loop();
  void optimizer_step();
  void begin_next_step();

  const ModelContext& ctx_;
  const graph::LayerGraph& graph_;
  const graph::GraphAnalysis& an_;
  const RunSettings& settings_;
  const GlobalConfig& config_;
  const std::vector<BlockChoice>& choices_;
  const SimulatorOptions& options_;
  int64_t batch_ = 1;
  int64_t seq_ = 1;
  ModelStates states_;
  std::vector<int64_t> tensor_bytes_;
  std::vector<int64_t> handle_;
  std::vector<int64_t> grad_handle_;
  std::vector<int> pending_;
  std::vector<int> saved_;
  std::vector<int> held_by_checkpoint_;
  std::vector<bool> cached_casts_;     // autocast_cached_casts
  std::vector<int> held_by_cast_cache_;  // tensors autocast's cache holds to the forward's end
  std::vector<NodeTimes> times_;
  std::vector<int64_t> block_param_bytes_;   // what ZeRO-3 / FSDP gathers per block
  std::vector<int64_t> block_shard_bytes_;   // the same parameters as FSDP's shards store them (fp32 or not)
  std::map<int, std::vector<int>> offloaded_tensors_;  // block -> tensors sent to the host
  std::map<int, double> prefetch_done_;                // block -> time its tensors are back
  std::map<int, int64_t> all_gather_buffers_;          // FSDP2: block -> its prefetched copy-in buffer
  int64_t root_params_ = -1;                           // FSDP2: the root group's unsharded parameters
  int kept_layer_ = -1;                                // FSDP2: the layer left unsharded after forward
  std::map<int, int64_t> kept_unsharded_;              // block -> unsharded parameters kept until its backward
  std::vector<int64_t> root_grads_;                    // FSDP2: the root group's unsharded gradients
  std::vector<int64_t> offload_shards_;                // FSDP1 offload: sharded gradients until the final callback
  std::map<int, int64_t> unsynced_;                    // no_sync: block -> its unit's held unsharded gradient
  int64_t root_unsynced_ = -1;                         // no_sync: the root's held unsharded gradient
  std::map<std::string, int> shared_uses_;               // weights used by several nodes -> their uses
  std::map<std::string, const graph::Param*> owners_;    // parameter name -> the parameter
  std::map<std::string, int> seen_uses_;                 // uses backward has reached this micro-step
  std::map<std::string, int64_t> shared_grads_;          // gradients still being summed
  std::deque<int> input_stash_;                        // checkpointed blocks whose inputs are still on the GPU
  std::vector<bool> inputs_on_host_;                   // per block: its checkpoint inputs were evicted
  std::vector<int64_t> param_grads_;                   // progressive gradient handles
  std::set<int> sharded_made_;                          // FSDP units (-1: the root) whose sharded gradient exists
  CachingAllocatorModel allocator_;
  std::unordered_map<int64_t, std::pair<int64_t, int>> live_;
  std::map<std::string, int> category_ids_;
  std::vector<std::string> category_names_;
  std::vector<int> block_categories_;
  std::vector<int64_t> by_category_;
  std::vector<int64_t> peak_categories_;
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> delayed_;
  double clock_ = 0;
  double copy_out_free_ = 0;
  double copy_in_free_ = 0;
  double comm_free_ = 0;
  int micro_ = 0;
  bool lazy_states_made_ = false;             // the optimizer's first step() has run
  bool replaying_lengths_ = false;            // this simulator replays batches of varied length (run_varied_lengths)
  std::map<Phase, double> compute_phase_ms_;  // compute-stream time by phase, skipped micro-steps included
  std::string label_ = "start";
  struct RawSample {
    double time_ms;
    int64_t allocated;
    int64_t reserved;
    int label;  // index into labels_
  };
  std::vector<RawSample> samples_;
  std::vector<std::string> labels_;
  Simulation out_;
  TimeBreakdown time_;
};

// Keeps at most max_memory_samples points, preserving in every stretch the
// sample with the highest reserved and the one with the highest allocated
// memory, so the peaks survive; then gives the kept ones their labels.
void StepSimulator::thin_samples() {
  const size_t limit = static_cast<size_t>(std::max(options_.max_memory_samples, 0));
  if (limit == 0 || samples_.empty()) return;
  const size_t buckets = std::max<size_t>(1, limit / 2);
  const size_t per = std::max<size_t>(1, (samples_.size() + buckets - 1) / buckets);
  for (size_t start = 0; start < samples_.size(); start += per) {
    const size_t end = std::min(samples_.size(), start + per);
    size_t top_reserved = start;
    size_t top_allocated = start;
    for (size_t i = start; i < end; ++i) {
      if (samples_[i].reserved > samples_[top_reserved].reserved) top_reserved = i;
      if (samples_[i].allocated > samples_[top_allocated].allocated) top_allocated = i;
    }
    for (size_t i : {std::min(top_reserved, top_allocated), std::max(top_reserved, top_allocated)}) {
      const RawSample& raw = samples_[i];
      out_.memory.push_back({raw.time_ms, raw.allocated, raw.reserved, labels_[raw.label]});
      if (top_reserved == top_allocated) break;
    }
  }
  // The end of the step stays: it shows what remains between steps.
  const RawSample& last = samples_.back();
  if (out_.memory.back().time_ms != last.time_ms || out_.memory.back().allocated != last.allocated) {
    out_.memory.push_back({last.time_ms, last.allocated, last.reserved, labels_[last.label]});
  }
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
          if (param.tied_to.empty()) alloc(param_storage_bytes(param, settings_.precision), "parameters");
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
  if (!progressive && states_.grads_full > 0 && states_.sharded_block_grads.empty()) {
    alloc(states_.grads_full, "gradients");
  }
  if (states_.comm_buckets > 0) alloc(states_.comm_buckets, "ZeRO buffers");
  alloc(ctx_.gpu.cublas_workspace_bytes, "workspaces");
  for (size_t t = 0; t < graph_.tensors.size(); ++t) {
    if (an_.persistent[t]) handle_[t] = alloc(tensor_bytes_[t], "persistent activations");
  }
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
  const bool saving = !checkpointed(block) || recompute;
  const std::string prefix = recompute ? "recompute " : "forward ";
  const int64_t gathered = recompute ? -1 : gather(block, block + 1);
  if (checkpointed(block) && !recompute) {
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
  }
  for (int n : an_.blocks[block].nodes) {
    const Node& node = graph_.nodes[n];
    label_ = prefix + node.name;
    for (int t : an_.node_outputs[n]) {
      if (an_.persistent[t] || handle_[t] >= 0) continue;
      handle_[t] = alloc(tensor_bytes_[t], block_category(block));
      pending_[t] = 0;
      for (int consumer : an_.consumers[t]) {
        // In a recompute only this block's consumers run again.
        if (!recompute || graph_.nodes[consumer].block == block) ++pending_[t];
      }
      for (int holder : an_.holders[t]) {
        if (!recompute || graph_.nodes[holder].block == block) ++pending_[t];
      }
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
}

// torchtune OffloadActivations: the checkpoint's saved inputs are copied to pinned
// host memory as the block starts; their GPU copies stay in a forward stash until
// kCheckpointOffloadStash later ones have been packed (training/_activation_offloading.py).
void StepSimulator::stash_checkpoint_inputs(int block) {
  int64_t bytes = 0;
  for (int t : an_.blocks[block].boundary_inputs) {
    if (handle_[t] >= 0) bytes += tensor_bytes_[t];
  }
  const double start = std::max(clock_, copy_out_free_);
  copy_out_free_ = event(Stream::kCopyOut, Phase::kOffload, start, transfer_ms(static_cast<double>(bytes)), block,
                         "offload inputs " + block_name(block), bytes);
  input_stash_.push_back(block);
  trim_input_stash(kCheckpointOffloadStash);
}

// The GPU copies leave once their copy is done (the pack waits on its event).
void StepSimulator::evict_checkpoint_inputs(int block) {
  if (copy_out_free_ > clock_) {
    time_.offload_exposed_ms += copy_out_free_ - clock_;
    clock_ = copy_out_free_;
  }
  for (int t : an_.blocks[block].boundary_inputs) {
    --held_by_checkpoint_[t];
    maybe_free(t);
  }
  inputs_on_host_[block] = true;
}

// Backward unpacks the inputs on demand: a new GPU copy, and compute waits for it.
void StepSimulator::fetch_checkpoint_inputs(int block) {
  if (!inputs_on_host_[block]) return;
  inputs_on_host_[block] = false;
  label_ = "fetch inputs " + block_name(block);
  int64_t bytes = 0;
  for (int t : an_.blocks[block].boundary_inputs) {
    if (handle_[t] < 0) {
      handle_[t] = alloc(tensor_bytes_[t], block_category(block));
      bytes += tensor_bytes_[t];
    }
    ++held_by_checkpoint_[t];
  }
  const double start = std::max(clock_, copy_in_free_);
  copy_in_free_ = event(Stream::kCopyIn, Phase::kOffload, start, transfer_ms(static_cast<double>(bytes)), block,
                        "fetch inputs " + block_name(block), bytes);
  if (copy_in_free_ > clock_) {
    time_.offload_exposed_ms += copy_in_free_ - clock_;
    clock_ = copy_in_free_;
  }
}

// Sends the block's saved tensors to pinned host memory on the copy stream; each
// leaves the GPU when its copy is done.
void StepSimulator::offload_block(int block) {
  std::vector<int>& sent = offloaded_tensors_[block];
  sent.clear();
  int64_t bytes = 0;
  for (int t : an_.blocks[block].saved_tensors) {
    if (handle_[t] < 0 || saved_[t] == 0) continue;
    sent.push_back(t);
    bytes += tensor_bytes_[t];
  }
  const double start = std::max(clock_, copy_out_free_);
  copy_out_free_ = event(Stream::kCopyOut, Phase::kOffload, start, transfer_ms(bytes), block,
                         "offload " + block_name(block), bytes);
  // Every save of the block's nodes on a sent tensor moves to the host copy.
  for (int t : sent) {
    for (int n : an_.blocks[block].nodes) {
      for (int saved : an_.node_saves[n]) {
        if (saved == t) delayed_.push({copy_out_free_, t});
      }
    }
  }
}

// Brings an offloaded block back: new GPU copies, allocated when the copy starts.
void StepSimulator::prefetch_block(int block) {
  if (!offloaded(block) || prefetch_done_.count(block)) return;
  settle(1e300);  // everything sent earlier has left by now (the copy-out stream is ordered)
  int64_t bytes = 0;
  label_ = "prefetch " + block_name(block);
  for (int t : offloaded_tensors_[block]) {
    if (handle_[t] < 0) handle_[t] = alloc(tensor_bytes_[t], block_category(block));
    for (int n : an_.blocks[block].nodes) {
      for (int saved : an_.node_saves[n]) saved_[t] += saved == t;
    }
    bytes += tensor_bytes_[t];
  }
  const double start = std::max(clock_, copy_in_free_);
  copy_in_free_ = event(Stream::kCopyIn, Phase::kOffload, start, transfer_ms(bytes), block,
                        "prefetch " + block_name(block), bytes);
  prefetch_done_[block] = copy_in_free_;
}

// Waits for an offloaded block's saved tensors to come back from the host.
void StepSimulator::wait_for_offloaded(int block) {
  if (offloaded(block)) {
    const double ready = prefetch_done_[block];
    if (ready > clock_) {
      time_.offload_exposed_ms += ready - clock_;
      clock_ = ready;
    }
    prefetch_done_.erase(block);
  }
}

// The gradients a node's backward makes for its parameters: each trainable
// parameter's own (the first backward of a progressive run), a shared weight's
// sum from its first use backward reaches, and the partials of its later uses.
StepSimulator::ParamGradWork StepSimulator::start_param_grads(const Node& node) {
  ParamGradWork work;
  for (const graph::Param& param : node.params) {
    const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
    const auto shared = shared_uses_.find(owner);
    if (shared == shared_uses_.end()) {
      if (states_.grads_progressive && micro_ == 0 && param.trainable && param.tied_to.empty()) {
        param_grads_.push_back(alloc(grad_bytes(param, settings_.precision), "gradients"));
      }
      continue;
    }
    const graph::Param& original = *owners_.at(owner);
    if (!original.trainable) continue;
    // Summed in autograd's input buffer from the first use backward reaches to the
    // last; every later use materialises its own partial first.
    const int seen = ++seen_uses_[owner];
    if (seen == 1) {
      if (states_.grads_progressive && micro_ == 0) {
        shared_grads_[owner] = alloc(grad_bytes(original, settings_.precision), "gradients");
      }
    } else {
      work.partials.push_back(alloc(grad_bytes(original, settings_.precision), "transient"));
    }
    if (seen == shared->second) work.finished.push_back(owner);
  }
  return work;
}

// After the node's kernel: partials freed, finished shared gradients joined to
// the others, and, with the optimizer in backward, this node's gradients stepped and freed.
void StepSimulator::finish_param_grads(const ParamGradWork& work, size_t grads_before) {
  for (int64_t partial : work.partials) release(partial);
  for (const std::string& owner : work.finished) {
    // AccumulateGrad runs once all uses are in: the gradient joins the others.
    const auto it = shared_grads_.find(owner);
    if (it != shared_grads_.end()) {
      param_grads_.push_back(it->second);
      shared_grads_.erase(it);
    }
    seen_uses_.erase(owner);
  }
  if (states_.grads_in_backward) {
    // Optimizer in backward: each gradient is stepped and freed as it is produced.
    for (size_t g = grads_before; g < param_grads_.size(); ++g) release(param_grads_[g]);
    param_grads_.resize(grads_before);
  }
}

// One node's backward: its input gradients, parameter gradients, workspace and
// kernel, then what it no longer needs.
void StepSimulator::backward_node(int n, int block) {
  const Node& node = graph_.nodes[n];
  label_ = "backward " + node.name;
  for (int t : an_.node_inputs[n]) {
    if (an_.requires_grad[t] && !an_.persistent[t] && grad_handle_[t] < 0) {
      grad_handle_[t] = alloc(tensor_bytes_[t], "activation gradients");
    }
  }
  const size_t grads_before = param_grads_.size();
  const ParamGradWork work = start_param_grads(node);
  const int64_t workspace = node.backward_workspace().at(batch_, seq_);
  const int64_t ws = workspace > 0 ? alloc(graph::dtype_bytes(ctx_.compute_dtype, workspace), "transient") : -1;
  compute(Phase::kBackward, times_[n].bwd_ms, block, label_, times_[n].bwd_flops);
  release(ws);
  finish_param_grads(work, grads_before);
  for (int t : an_.node_outputs[n]) {
    release(grad_handle_[t]);
    grad_handle_[t] = -1;
  }
  for (int t : an_.node_saves[n]) {
    if (saved_[t] > 0) {
      --saved_[t];
      maybe_free(t);
    }
  }
}

// A checkpointed block's backward ends: its inputs (and selective saves) are no longer held.
void StepSimulator::release_checkpoint_holds(int block) {
  for (int t : an_.blocks[block].boundary_inputs) {
    --held_by_checkpoint_[t];
    maybe_free(t);
  }
  for (int t : selective_saves(block)) {
    --held_by_checkpoint_[t];
    maybe_free(t);
  }
}

// The block's gradients as its backward ends: held unsharded under no_sync, the
// root's kept for the final callback, or FSDP2's reduce-scatter buffers and
// FSDP1 offload's sharded gradient. Returns whether this micro-step reduces.
bool StepSimulator::reduce_block_gradients(int block) {
  // FSDP under no_sync: before the last micro-step each unit keeps its unsharded
  // gradient (allocated by the first backward, added to in place after) and nothing
  // is reduced; the last micro-step reduces as usual and then frees it.
  const bool last_micro = micro_ + 1 == config_.grad_accum;
  const bool unsynced = !states_.unsynced_block_grads.empty();
  if (unsynced && grad_bytes_of_block(block) > 0) {
    int64_t& held = in_root_group(block) ? root_unsynced_ : unsynced_.try_emplace(block, -1).first->second;
    const int64_t bytes =
        in_root_group(block) ? states_.root_unsynced_grads : states_.unsynced_block_grads[block];
    if (held < 0 && bytes > 0) held = alloc(bytes, "gradients");
  }
  const bool syncing = !unsynced || last_micro;
  const int64_t reduce_bytes =
      static_cast<size_t>(block) < states_.reduce_scatter_block.size() ? states_.reduce_scatter_block[block] : 0;
  if (!syncing) {
    // no reduce-scatter: the gradient stays with the unit
  } else if (in_root_group(block) && grad_bytes_of_block(block) > 0) {
    root_grads_.push_back(alloc(grad_bytes_of_block(block), "gradients"));
  } else if (reduce_bytes > 0 && grad_bytes_of_block(block) > 0) {
    // FSDP2 foreach_reduce: the block's unsharded gradients and the reduce-scatter
    // input they are copied into, both live as its backward ends (the block's own
    // bytes, as the walk prices them: ModelStates::reduce_scatter_block).
    label_ = "reduce-scatter " + block_name(block);
    const int64_t buffers = alloc(reduce_bytes, "ZeRO buffers");
    if (!fsdp1()) copy_in_gradients({block}, "reduce-scatter copy-in " + block_name(block));
    if (static_cast<size_t>(block) < states_.offload_grad_shards.size() && states_.offload_grad_shards[block] > 0) {
      offload_shards_.push_back(alloc(states_.offload_grad_shards[block], "gradients"));
    }
    release(buffers);
    make_sharded_grad(block);
    if (const auto held = unsynced_.find(block); held != unsynced_.end()) {
      release(held->second);
      unsynced_.erase(held);
    }
  }
  return syncing;
}

// Gradient traffic of this block: reduce-scatter (ZeRO-2/3) or copies to a CPU optimizer.
void StepSimulator::gradient_traffic(int block, bool syncing) {
  const bool last_micro = micro_ + 1 == config_.grad_accum;
  const int64_t grad_bytes = grad_bytes_of_block(block);
  const int world = settings_.world_size();
  if (grad_bytes > 0 && world > 1 && syncing && (config_.zero_stage >= 2 || last_micro)) {
    // torch's FSDPs reduce in their reduce dtype, as step_time prices it: fp32
    // doubles a 16-bit gradient's bytes.
    const double reduced = static_cast<double>(grad_bytes) *
                           (fsdp() ? static_cast<double>(fsdp_reduce_bytes_per_element(settings_)) /
                                         static_cast<double>(grad_bytes_per_element(settings_.precision))
                                   : 1.0);
    const double ring = static_cast<double>(world - 1) / world * (config_.zero_stage >= 2 ? 1 : 2);
    const double bytes = ring * reduced;
    const double start = std::max(clock_, comm_free_);
    comm_free_ = event(Stream::kComm, Phase::kComm, start,
                       gradient_collective_ms(settings_, ctx_.gpu, config_.zero_stage, reduced),
                       block, "reduce gradients " + block_name(block), static_cast<int64_t>(bytes));
  }
  if (grad_bytes > 0 && config_.offload_optimizer != Offload::kNone && last_micro) {
    const double start = std::max(clock_, copy_out_free_);
    const int shard = config_.zero_stage >= 1 ? settings_.shard_group_size() : 1;
    copy_out_free_ = event(Stream::kCopyOut, Phase::kOptimizer, start, transfer_ms(static_cast<double>(grad_bytes) / shard),
                           block, "gradients to host " + block_name(block), grad_bytes);
  }
}

void StepSimulator::backward_block(int block) {
  if (!an_.blocks[block].on_autograd) return;
  // Prefetch this block if not yet in flight, and the next one to overlap it.
  prefetch_block(block);
  if (block > 0) prefetch_block(block - 1);
  wait_for_offloaded(block);
  const int64_t gathered = gather(block, block - 1);
  if (checkpointed(block)) {
    if (settings_.offload_checkpoint_inputs) fetch_checkpoint_inputs(block);
    forward_block(block, true);
  }
  const std::vector<int>& nodes = an_.blocks[block].nodes;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    if (an_.needs_input_grad[*it] || an_.needs_param_grad[*it]) backward_node(*it, block);
  }
  if (checkpointed(block)) release_checkpoint_holds(block);
  const bool syncing = reduce_block_gradients(block);
  if (gathered >= 0) release(gathered);
  gradient_traffic(block, syncing);
}

// Sizes and kernel times at another padded length: the graph's sizes are
// expressions in batch and sequence (graph::tensor_bytes).
void StepSimulator::set_length(int64_t seq) {
  if (seq == seq_) return;
  seq_ = seq;
  for (size_t t = 0; t < graph_.tensors.size(); ++t) {
    tensor_bytes_[t] = graph::tensor_bytes(graph_.tensors[t], ctx_.compute_dtype, batch_, seq_);
  }
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    times_[n] = node_times(graph_, an_, static_cast<int>(n), ctx_.compute_dtype, batch_, seq_, ctx_.gpu,
                           ctx_.time_options);
  }
}

void StepSimulator::micro_step() {
  const int blocks = static_cast<int>(graph_.blocks.size());
  gather_root();
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
  for (int b = blocks - 1; b >= 0; --b) backward_block(b);
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
    if (an_.persistent[t]) continue;
    pending_[t] = 0;
    saved_[t] = 0;
    held_by_checkpoint_[t] = 0;
    maybe_free(static_cast<int>(t));
    release(grad_handle_[t]);
    grad_handle_[t] = -1;
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
  for (int64_t handle : param_grads_) release(handle);  // zero_grad(set_to_none=True)
  param_grads_.clear();
  sharded_made_.clear();
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

// Unpacked data padded per batch (RunSettings::shortest_sample): a run from its
// first step of up to 256 micro-batches of varied length, each as long as the
// longest of its micro_batch samples, drawn uniformly from [shortest, seq_len] by
// a fixed generator (splitmix64: the same lengths on every platform). The caching
// allocator keeps what each size left cached: blocks split by short batches are
// too small for a long one, which cudaMallocs new segments
// (c10/cuda/CUDACachingAllocator.cpp: get_free_block, then alloc_block), so reserved
// memory grows over the run. At the GPU's budget the allocator releases its free
// segments and retries (release_cached_blocks), as the model does; an allocation
// that still fails is the out-of-memory a long run meets. Which sizes come first
// matters: a first batch at seq_len reserves segments every shorter batch can be
// cut from, while short batches first leave segments too small for the long
// ones; so the run starts as real ones do, at a drawn length.
void StepSimulator::replay_varied_lengths() {
  // 256 micro-batches up to graphs of 4096 nodes (an 80-layer LLM has ~2,500), fewer
  // beyond, at least 32: the replay's cost grows with both (simulator_bench).
  constexpr int64_t kVariedNodeSteps = int64_t{256} * 4096;
  const auto nodes = static_cast<int64_t>(std::max<size_t>(1, graph_.nodes.size()));
  const int64_t micro_steps = std::clamp<int64_t>(kVariedNodeSteps / nodes, 32, 256);
  const int64_t longest = seq_;
  const int64_t shortest = *settings_.shortest_sample;
  const int64_t accum = config_.grad_accum;
  const int64_t per_step = std::min(accum, micro_steps);
  const int64_t steps = (micro_steps + per_step - 1) / per_step;
  uint64_t state = 0x9E3779B97F4A7C15ULL;  // splitmix64 (Steele, Lea, Flood: OOPSLA 2014)
  const auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  const auto span = static_cast<uint64_t>(longest - shortest + 1);
  // The samples in the order the sampler hands them out: shuffled, or (the Trainer's
  // group_by_length) in megabatches of 50 x micro_batch x grad_accum sorted longest
  // first, the longest sample of all (here: one at seq_len) first of the run.
  const int64_t batch = config_.micro_batch;
  std::vector<int64_t> samples(static_cast<size_t>(steps * per_step * batch));
  for (int64_t& length : samples) length = shortest + static_cast<int64_t>(next() % span);
  if (settings_.group_by_length) {
    const auto megabatch = static_cast<ptrdiff_t>(50 * batch * accum);
    for (auto first = samples.begin(); first != samples.end();) {
      const auto last = samples.end() - first > megabatch ? first + megabatch : samples.end();
      std::sort(first, last, std::greater<>());
      first = last;
    }
    samples.front() = longest;
  }
  replaying_lengths_ = true;
  allocate_states();
  size_t drawn = 0;
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t m = 0; m < per_step; ++m) {
      int64_t length = shortest;
      for (int64_t sample = 0; sample < batch; ++sample) length = std::max(length, samples[drawn++]);
      set_length(length);
      // The first and last micro-steps differ (progressive gradients; collectives):
      // with more than micro_steps, the ones between are left out.
      micro_ = static_cast<int>(m + 1 == per_step ? accum - 1 : m);
      micro_step();
    }
    optimizer_step();
    out_.varied_length_micro_steps += per_step;
  }
  set_length(longest);
  replaying_lengths_ = false;
}

Simulation StepSimulator::run_varied_lengths() {
  replay_varied_lengths();
  return std::move(out_);
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
  const double peak = (settings_.precision == Precision::kFp32 ? ctx_.gpu.fp32_tflops : ctx_.gpu.bf16_tflops) * 1e12;
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

}  // namespace

Simulation simulate(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                    const std::vector<BlockChoice>& blocks, const SimulatorOptions& options) {
  StepSimulator simulator(context, settings, config, blocks, options);
  Simulation out = simulator.run();
  if (settings.shortest_sample && *settings.shortest_sample < context.seq_len) {
    StepSimulator varied(context, settings, config, blocks, options);
    const Simulation run = varied.run_varied_lengths();
    out.varied_length_micro_steps = run.varied_length_micro_steps;
    out.varied_peak_reserved = run.varied_peak_reserved;
    out.varied_peak_allocated = run.varied_peak_allocated;
    if (run.out_of_memory && !out.out_of_memory) {
      out.out_of_memory = true;
      out.varied_out_of_memory = true;
      out.out_of_memory_at = run.out_of_memory_at;
    }
  }
  return out;
}

}  // namespace headroom::planner
