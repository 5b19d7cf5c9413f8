// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// default settings) for one device and one stream: requests rounded to 512 B;
// a small pool (requests <= 1 MiB, 2 MiB segments) and a large pool (20 MiB
// segments for requests under 10 MiB, own segment rounded to 2 MiB above);
// best-fit search over cached free blocks of the pool; a block is split when
// the rest is at least 512 B (small) or more than 1 MiB (large); freed blocks
// merge with free neighbours of the same segment; segments are never returned
// except when a new one would not fit, when all fully free segments are
// released first (as on an OOM retry). Reserved = sum of segments.
// With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
// each pool is one growing segment instead (planner/expandable_pool.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "planner/expandable_pool.h"

namespace headroom::planner {

class CachingAllocatorModel {
 public:
  // `capacity_bytes`: what cudaMalloc may hand out in total (device memory minus context).
  explicit CachingAllocatorModel(int64_t capacity_bytes = INT64_MAX / 4, bool expandable_segments = false);

  // Returns a handle, or -1 when even after releasing cached segments the device is full.
  int64_t allocate(int64_t bytes);
  void release(int64_t handle);
  void set_capacity(int64_t capacity_bytes) { capacity_ = capacity_bytes; }

  int64_t allocated_bytes() const { return allocated_; }
  int64_t reserved_bytes() const { return reserved_; }
  // Expandable segments count as one segment per pool.
  int64_t segment_count() const { return static_cast<int64_t>(segments_.size()) + (expandable_small_ ? 2 : 0); }
  int64_t peak_allocated_bytes() const { return peak_allocated_; }
  int64_t peak_reserved_bytes() const { return peak_reserved_; }

 private:
  struct Block {
    int64_t segment = 0;
    int64_t offset = 0;
    int64_t size = 0;
    bool free = true;
    bool small = false;
  };
  // Free blocks ordered for best fit: (size, segment, offset).
  using FreeKey = std::tuple<int64_t, int64_t, int64_t>;
  struct Segment {
    int64_t size = 0;
    bool small = false;
    std::map<int64_t, int64_t> blocks;  // offset -> block id, in address order
  };

  int64_t allocate_expandable(int64_t size, bool small);
  int64_t new_segment(int64_t size, bool small);
  void release_free_segments();
  int64_t take(int64_t block_id, int64_t size);

  int64_t capacity_;
  int64_t allocated_ = 0;
  int64_t reserved_ = 0;
  int64_t peak_allocated_ = 0;
  int64_t peak_reserved_ = 0;
  int64_t next_segment_ = 0;
  int64_t next_block_ = 0;
  std::map<int64_t, Segment> segments_;
  std::unordered_map<int64_t, Block> blocks_;
  std::set<FreeKey> free_small_;
  std::set<FreeKey> free_large_;
  // Expandable segments: one pool each, and where each handle lives.
  std::optional<ExpandablePool> expandable_small_;
  std::optional<ExpandablePool> expandable_large_;
  struct ExpandableHandle {
    bool small = false;
    int64_t offset = 0;
  };
  std::unordered_map<int64_t, ExpandableHandle> expandable_handles_;
};

}  // namespace headroom::planner
