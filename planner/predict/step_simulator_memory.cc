// Allocation bookkeeping on the caching-allocator model, the clock and the memory curve.
#include "planner/predict/step_simulator.h"

#include <algorithm>

#include "planner/memory/allocator_rounding.h"

namespace headroom::planner {

using graph::Node;

int StepSimulator::category(const std::string& name) {
  const auto [it, inserted] = category_ids_.try_emplace(name, static_cast<int>(category_names_.size()));
  if (inserted) {
    category_names_.push_back(name);
    by_category_.push_back(0);
  }
  return it->second;
}

int StepSimulator::block_category(int block) {
  if (block_categories_.empty()) {
    for (const graph::Block& b : graph_.blocks) block_categories_.push_back(category("activations: " + b.name));
  }
  return block_categories_[block];
}

int64_t StepSimulator::alloc(int64_t bytes, const std::string& name, int stream) {
  return alloc(bytes, category(name), stream);
}

int64_t StepSimulator::alloc(int64_t bytes, int category, int stream) {
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
  live_bytes_ += size;
  if (!replaying_lengths_) ++out_.allocations;
  sample();
  return handle;
}

void StepSimulator::release(int64_t handle) {
  if (handle < 0) return;
  const auto it = live_.find(handle);
  by_category_[it->second.second] -= it->second.first;
  live_bytes_ -= it->second.first;
  live_.erase(it);
  allocator_.release(handle);
  sample();
}

void StepSimulator::sample() {
  const int64_t reserved = allocator_.reserved_bytes();
  const int64_t allocated = allocator_.allocated_bytes();
  out_.peak_live = std::max(out_.peak_live, live_bytes_);
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

void StepSimulator::maybe_free(int t) {
  if (handle_[t] < 0 || an_.persistent[t] || pending_[t] > 0 || saved_[t] > 0 || held_by_checkpoint_[t] > 0) return;
  release(handle_[t]);
  handle_[t] = -1;
}

void StepSimulator::settle(double until) {
  while (!delayed_.empty() && delayed_.top().first <= until) {
    const int t = delayed_.top().second;
    delayed_.pop();
    --saved_[t];
    maybe_free(t);
  }
}

double StepSimulator::event(Stream stream, Phase phase, double start, double duration, int block, const std::string& label,
             int64_t bytes, double flops) {
  if (replaying_lengths_) return start + duration;  // the timeline is the step at seq_len
  if (options_.record_events) {
    out_.events.push_back({stream, phase, start, start + duration, micro_, block, label, bytes, flops});
  }
  if (stream == Stream::kCompute) compute_phase_ms_[phase] += duration;
  return start + duration;
}

void StepSimulator::compute(Phase phase, double ms, int block, const std::string& label, double flops) {
  label_ = label;
  clock_ = event(Stream::kCompute, phase, clock_, ms, block, label, 0, flops);
  settle(clock_);
}

double StepSimulator::transfer_ms(double bytes) const { return planner::transfer_ms(bytes, ctx_.gpu.host_link_gbps); }

const std::string& StepSimulator::block_name(int block) const { return graph_.blocks[block].name; }

bool StepSimulator::checkpointed(int block) const { return choices_[block] == BlockChoice::kCheckpoint && an_.blocks[block].on_autograd; }

const std::vector<int>& StepSimulator::selective_saves(int block) const {
  static const std::vector<int> kNone;
  return static_cast<size_t>(block) < ctx_.checkpoint_saves.size() ? ctx_.checkpoint_saves[block] : kNone;
}

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

}  // namespace headroom::planner
