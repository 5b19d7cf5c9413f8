#include "planner/memory/expandable_pool.h"

#include <algorithm>
#include <cassert>
#include <tuple>
#include <vector>

#include "planner/memory/allocator_rounding.h"

namespace headroom::planner {
namespace {

// The pool's virtual range: PyTorch reserves address space for the whole device;
// here it only has to exceed anything mapped (capacities stay below 2^60).
constexpr int64_t kAddressSpan = int64_t{1} << 62;

}  // namespace

ExpandablePool::ExpandablePool(int64_t page_bytes) : page_(page_bytes) {
  blocks_[0] = Block{kAddressSpan, State::kUnmapped};
}

void ExpandablePool::set_state(Blocks::iterator block, State state) {
  if (block->second.state == State::kFree) free_.erase({block->second.size, block->first});
  block->second.state = state;
  if (state == State::kFree) free_.insert({block->second.size, block->first});
}

// Free blocks merge with free neighbours, unmapped ones with unmapped ones.
ExpandablePool::Blocks::iterator ExpandablePool::merge_with_neighbours(Blocks::iterator block) {
  const State state = block->second.state;
  assert(state != State::kAllocated);
  const auto absorb = [&](Blocks::iterator into, Blocks::iterator from) {
    if (state == State::kFree) {
      free_.erase({into->second.size, into->first});
      free_.erase({from->second.size, from->first});
    }
    into->second.size += from->second.size;
    blocks_.erase(from);
    if (state == State::kFree) free_.insert({into->second.size, into->first});
  };
  if (block != blocks_.begin()) {
    const auto previous = std::prev(block);
    if (previous->second.state == state) {
      absorb(previous, block);
      block = previous;
    }
  }
  const auto next = std::next(block);
  if (next != blocks_.end() && next->second.state == state) absorb(block, next);
  return block;
}

// Best fit by (size, address), but a block followed by unmapped space counts as
// that much larger (its effective size), so the growable tail is used last.
ExpandablePool::Blocks::iterator ExpandablePool::best_free_block(int64_t size) {
  auto candidate = free_.lower_bound({size, -1});
  if (candidate == free_.end()) return blocks_.end();
  const auto effective = [&](const std::pair<int64_t, int64_t>& key) {
    const auto next = std::next(blocks_.find(key.second));
    const bool before_unmapped = next != blocks_.end() && next->second.state == State::kUnmapped;
    return key.first + (before_unmapped ? std::min(next->second.size, kAddressSpan / 2) : 0);
  };
  for (auto next = std::next(candidate); next != free_.end() && effective(*next) < effective(*candidate); ++next) {
    candidate = next;
  }
  return blocks_.find(candidate->second);
}

bool ExpandablePool::map_pages(Blocks::iterator unmapped, int64_t bytes, int64_t& reserved, int64_t capacity) {
  const int64_t want = std::min(round_up(bytes, page_), unmapped->second.size);
  if (reserved + want > capacity) return false;
  if (want < unmapped->second.size) {
    blocks_[unmapped->first + want] = Block{unmapped->second.size - want, State::kUnmapped};
    unmapped->second.size = want;
  }
  set_state(unmapped, State::kFree);
  reserved += want;
  return true;
}

// find_expandable_block + try_allocate_expandable_block: the smallest unmapped
// range that, with the free block before it and what follows, spans `size`;
// maps what is missing and returns the free block that now holds `size`.
ExpandablePool::Blocks::iterator ExpandablePool::map_into(int64_t size, int64_t& reserved, int64_t capacity) {
  std::vector<std::pair<int64_t, int64_t>> unmapped;  // (size, offset)
  for (const auto& [offset, block] : blocks_) {
    if (block.state == State::kUnmapped) unmapped.emplace_back(block.size, offset);
  }
  std::sort(unmapped.begin(), unmapped.end());
  for (const auto& [unused, offset] : unmapped) {
    auto start = blocks_.find(offset);
    if (start != blocks_.begin() && std::prev(start)->second.state == State::kFree) start = std::prev(start);
    int64_t span = 0;
    for (auto it = start; it != blocks_.end() && it->second.state != State::kAllocated && span < size; ++it) {
      span += it->second.size;
    }
    if (span < size) continue;
    auto block = start;
    if (block->second.state == State::kUnmapped) {
      if (!map_pages(block, std::min(block->second.size, size), reserved, capacity)) return blocks_.end();
      block = merge_with_neighbours(block);
    }
    while (block->second.size < size) {
      const auto next = std::next(block);
      assert(next != blocks_.end() && next->second.state == State::kUnmapped);
      if (!map_pages(next, std::min(size - block->second.size, next->second.size), reserved, capacity)) {
        return blocks_.end();
      }
      block = merge_with_neighbours(next);
    }
    return block;
  }
  return blocks_.end();
}

void ExpandablePool::take(Blocks::iterator block, int64_t size) {
  const int64_t remaining = block->second.size - size;
  set_state(block, State::kAllocated);
  if (remaining >= kMinBlockBytes) {
    block->second.size = size;
    const auto rest = blocks_.emplace(block->first + size, Block{remaining, State::kAllocated}).first;
    set_state(rest, State::kFree);
    merge_with_neighbours(rest);
  }
}

int64_t ExpandablePool::allocate(int64_t size, int64_t& reserved, int64_t capacity) {
  auto block = best_free_block(size);
  if (block == blocks_.end()) block = map_into(size, reserved, capacity);
  if (block == blocks_.end()) return -1;
  const int64_t offset = block->first;
  take(block, size);
  return offset;
}

int64_t ExpandablePool::release(int64_t offset) {
  const auto block = blocks_.find(offset);
  assert(block != blocks_.end() && block->second.state == State::kAllocated);
  const int64_t size = block->second.size;
  set_state(block, State::kFree);
  merge_with_neighbours(block);
  return size;
}

int64_t ExpandablePool::unmap_free_pages() {
  std::vector<int64_t> free_offsets;
  for (const auto& [size, offset] : free_) free_offsets.push_back(offset);
  int64_t released = 0;
  for (int64_t offset : free_offsets) {
    auto block = blocks_.find(offset);
    const int64_t end = offset + block->second.size;
    const int64_t low = round_up(offset, page_);
    const int64_t high = end / page_ * page_;
    if (high <= low) continue;
    set_state(block, State::kAllocated);  // out of the free index while it is cut
    if (low > offset) {
      block->second.size = low - offset;
      set_state(block, State::kFree);
      block = blocks_.emplace(low, Block{high - low, State::kAllocated}).first;
    }
    block->second.size = high - low;
    if (end > high) set_state(blocks_.emplace(high, Block{end - high, State::kAllocated}).first, State::kFree);
    set_state(block, State::kUnmapped);
    merge_with_neighbours(block);
    released += high - low;
  }
  return released;
}

int64_t ExpandablePool::mapped_bytes() const {
  int64_t total = 0;
  for (const auto& [offset, block] : blocks_) {
    if (block.state != State::kUnmapped) total += block.size;
  }
  return total;
}

}  // namespace headroom::planner
