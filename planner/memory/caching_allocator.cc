#include "planner/memory/caching_allocator.h"

#include <algorithm>
#include <cassert>

#include "planner/memory/allocator_rounding.h"

namespace headroom::planner {
namespace {

// c10/cuda/CUDACachingAllocator.cpp: get_allocation_size().
int64_t segment_size_for(int64_t rounded) {
  if (rounded <= kSmallRequestBytes) return kSmallSegmentBytes;
  if (rounded < kMinLargeAllocBytes) return kLargeSegmentBytes;
  return round_up(rounded, kRoundLargeBytes);
}

// should_split(): small blocks split down to 512 B, large ones only when the
// remainder exceeds kSmallSize (1 MiB).
bool should_split(bool small, int64_t remaining) {
  return small ? remaining >= kMinBlockBytes : remaining > kSmallRequestBytes;
}

}  // namespace

CachingAllocatorModel::CachingAllocatorModel(int64_t capacity_bytes, bool expandable_segments)
    : capacity_(capacity_bytes), expandable_segments_(expandable_segments) {}

int64_t CachingAllocatorModel::reserved_bytes(int stream) const {
  int64_t total = 0;
  for (const auto& [id, segment] : segments_) {
    if (segment.stream == stream) total += segment.size;
  }
  for (const auto& [pool_key, pool] : expandable_) {
    if (pool_key.first == stream) total += pool.mapped_bytes();
  }
  return total;
}

int64_t CachingAllocatorModel::allocate_expandable(int64_t size, bool small, int stream) {
  const std::pair<int, bool> pool_key{stream, small};
  // Pages: kSmallBuffer for the small pool, the large segment size for the large one.
  ExpandablePool& pool =
      expandable_.try_emplace(pool_key, small ? kSmallSegmentBytes : kLargeSegmentBytes).first->second;
  int64_t offset = pool.allocate(size, reserved_, capacity_);
  if (offset < 0) {
    // The OOM retry: every pool gives back the pages its free blocks do not use.
    for (auto& [other_key, other] : expandable_) reserved_ -= other.unmap_free_pages();
    offset = pool.allocate(size, reserved_, capacity_);
  }
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  if (offset < 0) return -1;
  const int64_t handle = next_block_++;
  expandable_handles_[handle] = ExpandableHandle{pool_key, offset};
  allocated_ += size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return handle;
}

int64_t CachingAllocatorModel::new_segment(int64_t size, bool small, int stream) {
  if (reserved_ + size > capacity_) release_free_segments();
  if (reserved_ + size > capacity_) return -1;
  const int64_t segment_id = next_segment_++;
  const int64_t block_id = next_block_++;
  Segment& segment = segments_[segment_id];
  segment.size = size;
  segment.small = small;
  segment.stream = stream;
  segment.blocks[0] = block_id;
  blocks_[block_id] = Block{segment_id, 0, size, true, small, stream};
  (small ? free_small_ : free_large_).insert(key(blocks_[block_id]));
  reserved_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return block_id;
}

void CachingAllocatorModel::release_free_segments() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment& segment = it->second;
    const int64_t only = segment.blocks.size() == 1 ? segment.blocks.begin()->second : -1;
    if (only >= 0 && blocks_.at(only).free) {
      (segment.small ? free_small_ : free_large_).erase(key(blocks_.at(only)));
      blocks_.erase(only);
      reserved_ -= segment.size;
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
}

// Marks free block `block_id` used for `size` bytes, splitting off the rest.
int64_t CachingAllocatorModel::take(int64_t block_id, int64_t size) {
  Block& block = blocks_.at(block_id);
  auto& pool = block.small ? free_small_ : free_large_;
  pool.erase(key(block));
  const int64_t remaining = block.size - size;
  if (should_split(block.small, remaining)) {
    const int64_t rest_id = next_block_++;
    const Block rest{block.segment, block.offset + size, remaining, true, block.small, block.stream};
    blocks_[rest_id] = rest;
    segments_.at(block.segment).blocks[block.offset + size] = rest_id;
    pool.insert(key(rest));
    block.size = size;
  }
  block.free = false;
  allocated_ += block.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return block_id;
}

int64_t CachingAllocatorModel::allocate(int64_t bytes, int stream) {
  const int64_t size = allocated_bytes_for_request(bytes);
  const bool small = size <= kSmallRequestBytes;
  if (expandable_segments_) return allocate_expandable(size, small, stream);
  auto& pool = small ? free_small_ : free_large_;
  auto it = pool.lower_bound({stream, size, -1, -1});
  if (it != pool.end() && std::get<0>(*it) == stream) {
    const auto [block_stream, block_size, segment_id, offset] = *it;
    return take(segments_.at(segment_id).blocks.at(offset), size);
  }
  const int64_t block_id = new_segment(segment_size_for(size), small, stream);
  if (block_id < 0) return -1;
  return take(block_id, size);
}

void CachingAllocatorModel::release(int64_t handle) {
  if (const auto expandable = expandable_handles_.find(handle); expandable != expandable_handles_.end()) {
    ExpandablePool& pool = expandable_.at(expandable->second.pool);
    allocated_ -= pool.release(expandable->second.offset);
    expandable_handles_.erase(expandable);
    return;
  }
  auto found = blocks_.find(handle);
  assert(found != blocks_.end() && !found->second.free);
  Block& block = found->second;
  allocated_ -= block.size;
  block.free = true;
  Segment& segment = segments_.at(block.segment);
  auto& pool = block.small ? free_small_ : free_large_;
  // Merge with the free neighbours in the same segment.
  auto position = segment.blocks.find(block.offset);
  if (position != segment.blocks.begin()) {
    auto previous = std::prev(position);
    Block& left = blocks_.at(previous->second);
    if (left.free) {
      pool.erase(key(left));
      left.size += block.size;
      segment.blocks.erase(position);
      blocks_.erase(handle);
      handle = previous->second;
      position = previous;
    }
  }
  Block& merged = blocks_.at(handle);
  auto next = std::next(position);
  if (next != segment.blocks.end()) {
    Block& right = blocks_.at(next->second);
    if (right.free) {
      pool.erase(key(right));
      merged.size += right.size;
      blocks_.erase(next->second);
      segment.blocks.erase(next);
    }
  }
  pool.insert(key(merged));
}

}  // namespace headroom::planner
