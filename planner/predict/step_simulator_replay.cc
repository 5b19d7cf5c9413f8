// Batches of varied length: the allocator after many steps of drawn lengths.
#include "planner/predict/step_simulator.h"

#include <algorithm>

namespace headroom::planner {

using graph::Node;

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
  make_backward_gradients();
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

}  // namespace headroom::planner
