// Offloaded blocks and checkpoint inputs on the copy streams (torchtune OffloadActivations).
#include "planner/predict/step_simulator.h"

#include <algorithm>

#include "planner/predict/offload_stash.h"
#include "planner/predict/unsloth_checkpointer.h"

namespace headroom::planner {

using graph::Node;

bool StepSimulator::offloaded(int block) const { return choices_[block] == BlockChoice::kOffload && an_.blocks[block].on_autograd; }

void StepSimulator::trim_input_stash(size_t keep) {
  while (input_stash_.size() > keep) {
    evict_checkpoint_inputs(input_stash_.front());
    input_stash_.pop_front();
  }
}

// torchtune OffloadActivations: the checkpoint's saved inputs are copied to pinned
// host memory as the block starts; their GPU copies stay in a forward stash until
// kCheckpointOffloadStash later tensors have been packed, two a block (offload_stash.h).
void StepSimulator::stash_checkpoint_inputs(int block) {
  int64_t bytes = 0;
  for (int t : an_.blocks[block].boundary_inputs) {
    if (handle_[t] >= 0) bytes += tensor_bytes_[t];
  }
  const double start = std::max(clock_, copy_out_free_);
  copy_out_free_ = event(Stream::kCopyOut, Phase::kOffload, start, transfer_ms(static_cast<double>(bytes)), block,
                         "offload inputs " + block_name(block), bytes);
  input_stash_.push_back(block);
  trim_input_stash(static_cast<size_t>(stashed_checkpoint_blocks(kCheckpointOffloadStash)));
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

// `bytes` of block's checkpoint inputs come back on the copy-in stream; compute waits.
void StepSimulator::copy_in_before_compute(int block, int64_t bytes) {
  const double start = std::max(clock_, copy_in_free_);
  copy_in_free_ = event(Stream::kCopyIn, Phase::kOffload, start, transfer_ms(static_cast<double>(bytes)), block,
                        "fetch inputs " + block_name(block), bytes);
  if (copy_in_free_ > clock_) {
    time_.offload_exposed_ms += copy_in_free_ - clock_;
    clock_ = copy_in_free_;
  }
}

// Unsloth's checkpointer sends a checkpointed block's input to pinned host memory as the
// block starts (unsloth_checkpointer.h says which) and keeps no GPU reference: the input
// goes once the block's forward has read it.
bool StepSimulator::sends_inputs_to_host(int block) const {
  return unsloth_offload_ &&
         unsloth_sends_input_to_host(checkpointed(block) && an_.blocks[block].on_autograd,
                                     block == last_checkpointed_, checkpoint_input_bytes(block));
}

int64_t StepSimulator::checkpoint_input_bytes(int block) const {
  int64_t bytes = 0;
  for (int t : an_.blocks[block].boundary_inputs) bytes += tensor_bytes_[t];
  return bytes;
}

void StepSimulator::send_inputs_to_host(int block) {
  const int64_t bytes = checkpoint_input_bytes(block);
  const double start = std::max(clock_, copy_out_free_);
  copy_out_free_ = event(Stream::kCopyOut, Phase::kOffload, start, transfer_ms(static_cast<double>(bytes)), block,
                         "offload inputs " + block_name(block), bytes);
  for (int t : an_.blocks[block].boundary_inputs) --held_by_checkpoint_[t];
  inputs_on_host_[block] = true;
}

// Backward copies the input into one of the buffers (allocate_states): no new GPU
// bytes, and compute waits for the copy.
void StepSimulator::fetch_inputs_into_buffers(int block) {
  if (!inputs_on_host_[block]) return;
  inputs_on_host_[block] = false;
  const int64_t bytes = checkpoint_input_bytes(block);
  for (int t : an_.blocks[block].boundary_inputs) ++held_by_checkpoint_[t];
  copy_in_before_compute(block, bytes);
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
  copy_in_before_compute(block, bytes);
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

}  // namespace headroom::planner
