// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// default settings) for one device: requests rounded to 512 B;
// a small pool (requests <= 1 MiB, 2 MiB segments) and a large pool (20 MiB
// segments for requests under 10 MiB, own segment rounded to 2 MiB above);
// best-fit search over cached free blocks of the pool; a block is split when
// the rest is at least 512 B (small) or more than 1 MiB (large); freed blocks
// merge with free neighbours of the same segment; segments are never returned
// except when a new one would not fit, when all fully free segments are
// released first (as on an OOM retry). Reserved = sum of segments.
// Every segment belongs to the stream that allocated it, and a free block is
// reused only by a request on the same stream (get_free_block searches the
// pool by (stream, size); BlockComparatorSize orders by stream first): memory
// one stream cached is not there for another until an OOM retry releases it.
// With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
// each pool is one growing segment per stream instead (planner/memory/expandable_pool.h;
// try_allocate_expandable_block looks for a segment of the request's stream).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "planner/memory/expandable_pool.h"

namespace headroom::planner {

class CachingAllocatorModel {
 public:
  // `capacity_bytes`: what cudaMalloc may hand out in total (device memory minus context).
  explicit CachingAllocatorModel(int64_t capacity_bytes = INT64_MAX / 4, bool expandable_segments = false);

  // Returns a handle, or -1 when even after releasing cached segments the device is full.
  // `stream`: 0 is the compute stream; other small integers name side streams.
  int64_t allocate(int64_t bytes, int stream = 0);
  void release(int64_t handle);
  void set_capacity(int64_t capacity_bytes) { capacity_ = capacity_bytes; }

  int64_t allocated_bytes() const { return allocated_; }
  int64_t reserved_bytes() const { return reserved_; }
  // Expandable segments count as one segment per pool.
  int64_t segment_count() const { return static_cast<int64_t>(segments_.size() + expandable_.size()); }
  // Bytes of segments that belong to `stream`.
  int64_t reserved_bytes(int stream) const;
  int64_t peak_allocated_bytes() const { return peak_allocated_; }
  int64_t peak_reserved_bytes() const { return peak_reserved_; }

 private:
  struct Block {
    int64_t segment = 0;
    int64_t offset = 0;
    int64_t size = 0;
    bool free = true;
    bool small = false;
    int stream = 0;
  };
  // Free blocks ordered for best fit within a stream: (stream, size, segment, offset).
  using FreeKey = std::tuple<int, int64_t, int64_t, int64_t>;
  struct Segment {
    int64_t size = 0;
    bool small = false;
    int stream = 0;
    std::map<int64_t, int64_t> blocks;  // offset -> block id, in address order
  };
  static FreeKey key(const Block& block) { return {block.stream, block.size, block.segment, block.offset}; }

  int64_t allocate_expandable(int64_t size, bool small, int stream);
  int64_t new_segment(int64_t size, bool small, int stream);
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
  // Expandable segments: one per (stream, small or large pool), made on first use,
  // and where each handle lives.
  bool expandable_segments_ = false;
  std::map<std::pair<int, bool>, ExpandablePool> expandable_;
  struct ExpandableHandle {
    std::pair<int, bool> pool;
    int64_t offset = 0;
  };
  std::unordered_map<int64_t, ExpandableHandle> expandable_handles_;
};

}  // namespace headroom::planner
