// One pool (small or large) of PyTorch's CUDA caching allocator with
// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (c10/cuda/CUDACachingAllocator.cpp,
// Note [Expandable Segments], find_expandable_block, map_block,
// try_allocate_expandable_block). The pool is one virtual address range, mapped
// to physical memory in pages (2 MiB small, 20 MiB large) only where it is used:
// - a request is served best-fit from free mapped blocks, preferring a block
//   not followed by unmapped space (the tail, which can grow, is used last);
// - a miss maps only the shortfall: the free block before unmapped space is
//   extended by whole pages, and the new pages merge with it;
// - a block splits whenever at least 512 bytes remain;
// - freed blocks merge with free neighbours; pages stay mapped until memory
//   runs out, when every free block gives back the whole pages inside it
//   (release_cached_blocks) and the request is tried again.
// Reserved memory is the mapped bytes.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace headroom::planner {

class ExpandablePool {
 public:
  explicit ExpandablePool(int64_t page_bytes);

  // Serves `size` bytes (already rounded to 512); returns the block's offset, or
  // -1 when mapping would take reserved memory past `capacity`. `reserved` is the
  // allocator's total, raised by what is mapped.
  int64_t allocate(int64_t size, int64_t& reserved, int64_t capacity);
  // Frees the block at `offset`; returns its size.
  int64_t release(int64_t offset);
  // Unmaps the whole pages inside every free block; returns the bytes given back.
  int64_t unmap_free_pages();
  // Bytes mapped: this pool's share of reserved memory.
  int64_t mapped_bytes() const;

 private:
  enum class State { kAllocated, kFree, kUnmapped };
  struct Block {
    int64_t size = 0;
    State state = State::kUnmapped;
  };
  using Blocks = std::map<int64_t, Block>;  // offset -> block, in address order

  Blocks::iterator best_free_block(int64_t size);
  Blocks::iterator map_into(int64_t size, int64_t& reserved, int64_t capacity);
  bool map_pages(Blocks::iterator unmapped, int64_t bytes, int64_t& reserved, int64_t capacity);
  Blocks::iterator merge_with_neighbours(Blocks::iterator block);
  void set_state(Blocks::iterator block, State state);
  void take(Blocks::iterator block, int64_t size);

  int64_t page_;
  Blocks blocks_;
  std::set<std::pair<int64_t, int64_t>> free_;  // (size, offset) of free mapped blocks
};

}  // namespace headroom::planner
