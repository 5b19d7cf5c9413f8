// The step simulator's state and steps (planner/predict/simulator.h is its entry,
// `simulate`). Internal to planner/predict: one class, its parts in files by what
// they simulate: step_simulator.cc (the step: states, forward, the accumulation
// loop, the optimizer step), step_simulator_backward.cc (backward, node by node, and
// what a block's backward holds), step_simulator_memory.cc (allocation
// bookkeeping on the caching-allocator model, the clock, the memory curve),
// step_simulator_fsdp.cc (ZeRO-3 and FSDP gathers, copies and gradient reduction),
// step_simulator_offload.cc (offloaded blocks and checkpoint inputs on the copy
// streams), step_simulator_replay.cc (batches of varied length).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "planner/memory/caching_allocator.h"
#include "planner/memory/model_states.h"
#include "planner/memory/state_bytes.h"
#include "planner/predict/simulation.h"
#include "planner/predict/deepspeed_gathered.h"
#include "planner/predict/simulator_options.h"
#include "planner/predict/step_builder.h"
#include "planner/settings/stack.h"
#include "planner/time/backward_gradients.h"
#include "planner/time/step_time.h"

namespace headroom::planner {

// Everything one simulated step needs, and its running state.
class StepSimulator {
 public:
  StepSimulator(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                const std::vector<BlockChoice>& choices, const SimulatorOptions& options);

  Simulation run();
  // A run of batches of varied length from its first step (replay_varied_lengths).
  Simulation run_varied_lengths();

 private:
  // --- allocation bookkeeping ---
  // Categories are small integers; names_[id] is what the report shows.
  int category(const std::string& name);
  int block_category(int block);
  int64_t alloc(int64_t bytes, const std::string& name, int stream = 0);
  int64_t alloc(int64_t bytes, int category, int stream = 0);
  void release(int64_t handle);
  void sample();
  void maybe_free(int t);
  // Frees whose copies finished by now (offloaded activations leaving the GPU).
  void settle(double until);
  double event(Stream stream, Phase phase, double start, double duration, int block, const std::string& label,
               int64_t bytes = 0, double flops = 0);
  void compute(Phase phase, double ms, int block, const std::string& label, double flops);
  double transfer_ms(double bytes) const;
  const std::string& block_name(int block) const;
  bool checkpointed(int block) const;
  const std::vector<int>& selective_saves(int block) const;
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
  int64_t gather(int block, int ahead);
  // DeepSpeed (step_simulator_deepspeed.cc), as the walk prices it: ZeRO-3's coordinator
  // holds what it gathered beside `block` (zero3_gathered_bytes). A gradient larger than the
  // reduce bucket stays in autograd's tensor from its node's backward to the next hook
  // (ZeRO-3: __add_grad_to_ipg_bucket; ZeRO-2: extra_large_param_to_reduce, with its
  // flattened copy once its block is done). ZeRO-2 makes its gradient partition at the
  // first reduction (deepspeed_partition_block) and frees it at the step; a tied weight's
  // first partial is held until its last use's backward joins it.
  int64_t deepspeed_gather(int block);
  void plan_deepspeed_hooks();
  void make_backward_buckets(int n);
  void release_held_oversized(int n);
  void deepspeed_hooks_before(int n);
  void deepspeed_hooks_after(int n);
  void deepspeed_block_done();
  void deepspeed_backward_done();
  void make_partition();
  void drop_partition();
  void hold_tied_partial(const std::string& owner, const graph::Param& original);
  void release_tied_partial(const std::string& owner);
  void prefetch_gather(int ahead);  // the all-gather of `ahead` issued now, if not yet in flight
  // FSDP2's all-gather buffer for `block` on the copy-in stream. Under CPU offload
  // each shard is first copied to the GPU in its stored dtype (all_gather_inputs:
  // .to(device); fp32 shards under mixed precision) and cast to the gathered dtype
  // when that differs (the 16-bit param dtype, or fp8 with the float8 all-gather);
  // those copies are dropped once foreach_all_gather has copied them into the buffer.
  // FSDP1's CPUOffload stages the same way: pre_unshard copies the fp32 shard in
  // (flat_param_to, or .to(device) inside _use_low_precision_shard) and casts it
  // into _mp_shard under mixed precision (torch/distributed/fsdp/_flat_param.py).
  int64_t all_gather_buffer(int block);
  // Bytes of one rank's shard copies on the GPU before the all-gather of parameters
  // whose shards hold `shard_bytes` (fp32 under mixed precision) and gathered in
  // `gathered`: the shard in its dtype, and its cast when that differs.
  int64_t offload_staging_bytes(int64_t shard_bytes, int64_t gathered_bytes) const;
  // The root group's bytes as stored and as gathered.
  std::pair<int64_t, int64_t> root_group_bytes() const;
  std::vector<int> root_blocks() const;
  // The root's shard copied in and cast again at its pre-backward, then dropped
  // (fsdp_restages_root).
  void restage_root();
  static constexpr int kAllGatherStream = 1;
  static constexpr int kReduceScatterStream = 2;
  bool holds_partial_beside_grad() const;
  bool fsdp() const { return fsdp_shards_params(settings_, config_.zero_stage); }
  // Whether `block` keeps its unsharded parameters from its forward to its backward:
  // FSDP at ZeRO-2 (fsdp_keeps_unsharded), or the layer the stack leaves unsharded.
  bool keeps_unsharded(int block) const;
  bool fsdp1() const { return fsdp() && sharding_of(settings_) == Sharding::kFsdp1; }
  bool in_root_group(int block) const { return fsdp() && in_fsdp2_root(graph_, block, settings_); }
  // FSDP2's root group: one all-gather at the root's pre-forward, through a buffer
  // on the all-gather stream, into unsharded parameters that stay until the end
  // of backward (planner/memory/model_states.h, fsdp2_root_params).
  void gather_root();
  // FSDP2's copies on the compute stream (planner/time/fsdp2_stream_copies.h), exposed:
  // each all-gather copied out into the unsharded parameters (`bytes` read and
  // written), and the gradients copied into each reduce-scatter input.
  void copy_out_gathered(int block, int64_t bytes, const std::string& label);
  void copy_in_gradients(const std::vector<int>& blocks, const std::string& label);
  void stream_copy(int block, int64_t bytes, const std::string& label);
  // The root's post-backward in the final callback: its reduce-scatter input
  // beside its unsharded gradients, then all of it and the parameters are freed.
  void reshard_root();
  // A unit's sharded gradient, made by its first reduce-scatter of the step and
  // accumulated into by the next ones, lives until zero_grad frees it
  // (ModelStates::sharded_block_grads; block -1 is the root's).
  void make_sharded_grad(int block);
  int64_t grad_bytes_of_block(int block) const;
  bool offloaded(int block) const;

  void allocate_states();
  void thin_samples();
  void forward_block(int block, bool recompute);
  // DPO's reference forward over the same batch, under no_grad before the policy's
  // (dpo_reference_forward): every block without saves, its tensors freed as read.
  void reference_forward();
  void release_reads(int n, int block, bool recompute);
  void stash_checkpoint_inputs(int block);
  void send_inputs_to_host(int block);
  void fetch_inputs_into_buffers(int block);
  void copy_in_before_compute(int block, int64_t bytes);
  int64_t checkpoint_input_bytes(int block) const;
  bool sends_inputs_to_host(int block) const;
  void evict_checkpoint_inputs(int block);
  // Evicts the oldest stashed checkpoint inputs until at most `keep` stay on the GPU.
  void trim_input_stash(size_t keep);
  void fetch_checkpoint_inputs(int block);
  void offload_block(int block);
  void prefetch_block(int block);
  void backward_block(int block);
  void backward_block_nodes(int block);
  void release_made_tables(int block);  // block -1: all of them
  // backward_block's steps (step_simulator.cc, in the order it runs them).
  struct ParamGradWork {
    std::vector<int64_t> partials;     // later uses of a shared weight: their partial gradients
    std::vector<std::string> finished;  // shared weights whose last use in backward this is
  };
  void wait_for_offloaded(int block);
  ParamGradWork start_param_grads(int n);
  void finish_param_grads(const ParamGradWork& work, size_t grads_before);
  void backward_node(int n, int block);
  // A mul's inputs whose gradients its backward makes in the dtype it promoted them to
  // (BackwardGradients::promoted_gradient), and those wide gradients' handles.
  struct PromotedGradients {
    std::vector<int> inputs;
    std::vector<int64_t> wide;
  };
  void cast_promoted_gradients(const PromotedGradients& promoted);
  void release_saves(int n);
  int64_t alloc_backward_workspace(int n);
  void release_checkpoint_holds(int block);
  void copy_ctx_tensors(int n, int block);
  bool reduce_block_gradients(int block);
  // One unit's reduce-scatter (step_simulator_fsdp.cc): FSDP2 keeps its input until the
  // next group's post_backward, or the root's final callback, drops it (drop_reduce_input).
  void reduce_scatter_block(int block, int64_t reduce_bytes);
  void drop_reduce_input();
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
  std::vector<bool> read_by_later_block_;  // some consumer lies in a later block (the profile's out_grad)
  // The step walk's gradients in flight per backward node, over tensor_bytes_ (made
  // again when set_length changes them): the simulator takes its shared weights'
  // partials from it, so that both price one mechanism once.
  std::unique_ptr<const BackwardGradients> backward_grads_;
  void make_backward_gradients();
  std::vector<int64_t> handle_;
  std::vector<int64_t> grad_handle_;
  std::vector<int> pending_;
  std::vector<int> saved_;
  std::vector<int> held_by_checkpoint_;
  std::vector<bool> cached_casts_;     // autocast_cached_casts
  std::vector<bool> held_by_graph_;    // leaves their AccumulateGrad holds to the micro-step's end
  std::vector<int64_t> held_args_;      // a reentrant checkpoint's out_grads, to its block's backward end
  std::vector<int> made_first_reader_;  // per made persistent tensor, its earliest reader's block; -1 otherwise
  std::vector<int> held_by_cast_cache_;  // tensors autocast's cache holds to the forward's end
  // A non-reentrant recompute's second copies of ctx tensors (ctx_recomputed_tensors),
  // per block: which tensors, and the copies live until the block's backward ends.
  std::vector<std::vector<int>> ctx_recomputed_;
  std::vector<std::vector<int64_t>> ctx_copies_;
  std::vector<NodeTimes> times_;
  std::vector<int64_t> block_param_bytes_;   // what ZeRO-3 / FSDP gathers per block
  std::vector<int64_t> block_shard_bytes_;   // the same parameters as FSDP's shards store them (fp32 or not)
  Zero3Gathered deepspeed_gathered_;           // DeepSpeed ZeRO-3's per block (empty otherwise)
  bool in_backward_ = false;                   // the micro-step's backward has begun
  bool no_grad_ = false;                       // a forward outside autograd (DPO's reference)
  std::vector<int64_t> oversized_grads_;       // per node: gradients over the bucket it completes
  std::vector<std::pair<int, int64_t>> held_oversized_;  // (node made at, handle) not yet reduced; ZeRO-2's copies at -1
  int64_t oversized_uncopied_ = 0;             // ZeRO-2: held bytes whose flattened copy is not made
  bool zero2_hooks_ = false;                   // deepspeed_zero2_hooks
  int partition_block_ = -1;                   // ZeRO-2: the block making the partition (-1: the end)
  int64_t partition_ = -1;                     // ZeRO-2: the gradient partition, made in backward
  std::map<std::string, int64_t> tied_partials_;  // ZeRO-2: a tied weight's partial until its last use
  std::set<std::string> tied_across_blocks_;       // weights used by more than one block
  std::map<int, std::vector<int>> offloaded_tensors_;  // block -> tensors sent to the host
  std::map<int, double> prefetch_done_;                // block -> time its tensors are back
  std::map<int, int64_t> all_gather_buffers_;          // FSDP2: block -> its prefetched copy-in buffer
  int64_t root_params_ = -1;                           // FSDP2: the root group's unsharded parameters
  int kept_tail_ = -1;  // accelerate's tail unit, kept from its forward to its backward (fsdp2_kept_tail)
  bool grads_through_forward_ = false;  // StackSpec::grads_through_forward
  bool reentrant_recompute_ = false;    // checkpoints run CheckpointFunction (use_reentrant=True)
  std::vector<int64_t> held_grads_;     // the previous step's gradients, until the next backward
  int64_t tail_copy_in_ = -1;  // the kept tail's all-gather output, freed as the forward ends
  int kept_layer_ = -1;                                // FSDP2: the layer left unsharded after forward
  std::map<int, int64_t> kept_unsharded_;              // block -> unsharded parameters kept until its backward
  std::vector<int64_t> root_grads_;                    // FSDP2: the root group's unsharded gradients
  std::vector<int64_t> offload_shards_;                // FSDP1 offload: sharded gradients until the final callback
  std::map<int, int64_t> unsynced_;                    // no_sync: block -> its unit's held unsharded gradient
  int64_t root_unsynced_ = -1;                         // no_sync: the root's held unsharded gradient
  int64_t reduce_input_ = -1;                          // FSDP2: the last reduce-scatter input (reduce_scatter_state)
  std::map<std::string, int> shared_uses_;               // weights used by several nodes -> their uses
  std::map<std::string, const graph::Param*> owners_;    // parameter name -> the parameter
  std::map<std::string, int> seen_uses_;                 // uses backward has reached this micro-step
  std::map<std::string, int64_t> shared_grads_;          // gradients still being summed
  std::deque<int> input_stash_;                        // checkpointed blocks whose inputs are still on the GPU
  std::vector<bool> inputs_on_host_;                   // per block: its checkpoint inputs were evicted
  bool unsloth_offload_ = false;   // Unsloth's checkpointer (unsloth_offloads_checkpoint_inputs)
  int last_checkpointed_ = -1;     // the last checkpointed block, whose input Unsloth keeps
  std::vector<int64_t> param_grads_;                   // progressive gradient handles
  int64_t backward_buckets_ = -1;  // ZeRO-1/2 reduce buckets, first gradient hook to end of backward
  std::set<int> sharded_made_;                          // FSDP units (-1: the root) whose sharded gradient exists
  CachingAllocatorModel allocator_;
  std::unordered_map<int64_t, std::pair<int64_t, int>> live_;
  std::map<std::string, int> category_ids_;
  std::vector<std::string> category_names_;
  std::vector<int> block_categories_;
  std::vector<int64_t> by_category_;
  int64_t live_bytes_ = 0;  // the sum of by_category_: live tensors, blocks' tails left out
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

}  // namespace headroom::planner
