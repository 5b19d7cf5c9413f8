// The caching-allocator model against the rules of PyTorch's
// c10/cuda/CUDACachingAllocator.cpp (default configuration).
#include <doctest/doctest.h>

#include "planner/memory/caching_allocator.h"

namespace headroom::planner {
namespace {
constexpr int64_t kMiB = 1 << 20;
}

TEST_CASE("small requests round to 512 B and share 2 MiB segments") {
  CachingAllocatorModel allocator;
  const int64_t a = allocator.allocate(1);
  CHECK(allocator.allocated_bytes() == 512);
  CHECK(allocator.reserved_bytes() == 2 * kMiB);
  const int64_t b = allocator.allocate(kMiB - 512);
  CHECK(allocator.reserved_bytes() == 2 * kMiB);
  CHECK(allocator.segment_count() == 1);
  allocator.release(a);
  allocator.release(b);
  CHECK(allocator.allocated_bytes() == 0);
  CHECK(allocator.reserved_bytes() == 2 * kMiB);  // cached, not returned
}

TEST_CASE("medium requests come from 20 MiB segments, large ones get their own rounded to 2 MiB") {
  CachingAllocatorModel allocator;
  allocator.allocate(5 * kMiB);
  allocator.allocate(5 * kMiB);
  CHECK(allocator.reserved_bytes() == 20 * kMiB);
  CHECK(allocator.segment_count() == 1);
  allocator.allocate(11 * kMiB);
  CHECK(allocator.reserved_bytes() == 20 * kMiB + 12 * kMiB);
  // The 1 MiB left in the 12 MiB segment is not split off (needs > 1 MiB), so
  // the whole block counts as allocated, as torch.cuda.memory_allocated shows.
  CHECK(allocator.allocated_bytes() == 10 * kMiB + 12 * kMiB);
}

TEST_CASE("freed blocks are cached, reused best-fit, and merge with free neighbours") {
  CachingAllocatorModel allocator;
  const int64_t big = allocator.allocate(64 * kMiB);
  allocator.release(big);
  const int64_t a = allocator.allocate(30 * kMiB);
  const int64_t b = allocator.allocate(30 * kMiB);
  CHECK(allocator.reserved_bytes() == 64 * kMiB);  // both carved from the cached segment
  allocator.release(a);
  allocator.release(b);
  allocator.allocate(64 * kMiB);  // only possible if the two halves merged back
  CHECK(allocator.reserved_bytes() == 64 * kMiB);
  CHECK(allocator.segment_count() == 1);
}

TEST_CASE("fragmentation: a hole too small for the next request costs a new segment") {
  CachingAllocatorModel allocator;
  const int64_t a = allocator.allocate(40 * kMiB);
  const int64_t b = allocator.allocate(40 * kMiB);
  allocator.release(a);
  allocator.allocate(50 * kMiB);  // the 40 MiB hole does not fit it
  CHECK(allocator.reserved_bytes() == 130 * kMiB);
  CHECK(allocator.allocated_bytes() == 90 * kMiB);
  allocator.release(b);
}

TEST_CASE("at capacity, cached free segments are released before giving up") {
  CachingAllocatorModel allocator(30 * kMiB);
  const int64_t a = allocator.allocate(20 * kMiB);
  allocator.release(a);
  CHECK(allocator.allocate(25 * kMiB) >= 0);
  CHECK(allocator.reserved_bytes() == 26 * kMiB);
  CHECK(allocator.allocate(10 * kMiB) == -1);  // 26 + 10 > 30 and nothing is free
  CHECK(allocator.peak_reserved_bytes() == 26 * kMiB);
}

}  // namespace headroom::planner

namespace headroom::planner {
namespace {
constexpr int64_t kMebibyte = 1 << 20;
}

TEST_CASE("expandable segments: a miss maps only the shortfall, in 20 MiB pages, onto the free tail") {
  CachingAllocatorModel allocator(INT64_MAX / 4, /*expandable_segments=*/true);
  const int64_t a = allocator.allocate(30 * kMebibyte);
  CHECK(allocator.reserved_bytes() == 40 * kMebibyte);  // two pages; 10 MiB free at the tail
  const int64_t b = allocator.allocate(25 * kMebibyte);
  // The 10 MiB tail grows by one page to 30 MiB: 25 used, 5 left free.
  CHECK(allocator.reserved_bytes() == 60 * kMebibyte);
  allocator.release(a);
  // The default allocator's fragmentation case: a 40 MiB hole and a 50 MiB request.
  // Here the request takes a fresh range after the tail (the hole is not beside
  // unmapped space), mapping 50 - 5 = 45 MiB, rounded to 60.
  allocator.allocate(50 * kMebibyte);
  CHECK(allocator.reserved_bytes() == 120 * kMebibyte);
  CHECK(allocator.allocated_bytes() == 75 * kMebibyte);
  allocator.release(b);
  CHECK(allocator.segment_count() == 1);  // one segment per pool used: only the large one
  allocator.allocate(512);
  CHECK(allocator.segment_count() == 2);
}

TEST_CASE("a block one stream freed is not reused by another, an OOM retry releases it") {
  // get_free_block searches (stream, size): the side stream's cached 100 MiB block
  // stays cached while the compute stream maps its own segment.
  CachingAllocatorModel allocator(300 * kMebibyte);
  const int64_t side = allocator.allocate(100 * kMebibyte, /*stream=*/1);
  allocator.release(side);
  CHECK(allocator.reserved_bytes(1) == 100 * kMebibyte);
  const int64_t compute = allocator.allocate(100 * kMebibyte);
  CHECK(allocator.reserved_bytes(0) == 100 * kMebibyte);
  CHECK(allocator.reserved_bytes() == 200 * kMebibyte);
  // The same stream reuses its own cached block: nothing new.
  allocator.release(compute);
  allocator.allocate(100 * kMebibyte);
  CHECK(allocator.reserved_bytes() == 200 * kMebibyte);
  // 150 MiB more on the compute stream does not fit beside 200 reserved in 300: the
  // retry releases the side stream's free segment first (release_cached_blocks).
  CHECK(allocator.allocate(150 * kMebibyte) >= 0);
  CHECK(allocator.reserved_bytes(1) == 0);
  CHECK(allocator.reserved_bytes() == 250 * kMebibyte);
}

TEST_CASE("expandable segments: one growing range per stream") {
  CachingAllocatorModel allocator(INT64_MAX / 4, /*expandable_segments=*/true);
  allocator.release(allocator.allocate(30 * kMebibyte, 1));
  allocator.allocate(30 * kMebibyte);
  CHECK(allocator.reserved_bytes(1) == 40 * kMebibyte);  // stays mapped for stream 1
  CHECK(allocator.reserved_bytes(0) == 40 * kMebibyte);
  CHECK(allocator.segment_count() == 2);
}

TEST_CASE("expandable segments: freed neighbours merge into one range that serves a larger request") {
  // Default allocator: two segments of 2 and 4 units, freed, cannot serve 6 (a
  // block never spans segments): a third segment. Expandable: one range, whose
  // freed 6 units merge and serve it.
  for (bool expandable : {false, true}) {
    CAPTURE(expandable);
    CachingAllocatorModel allocator(INT64_MAX / 4, expandable);
    const int64_t unit = 100 * kMebibyte;
    const int64_t a = allocator.allocate(2 * unit);
    const int64_t b = allocator.allocate(4 * unit);
    allocator.release(a);
    allocator.release(b);
    allocator.allocate(6 * unit);
    CHECK(allocator.peak_allocated_bytes() == 6 * unit);
    CHECK(allocator.peak_reserved_bytes() == (expandable ? 6 : 12) * unit);
  }
}

TEST_CASE("expandable segments: out of memory, free pages are unmapped and the request retried") {
  CachingAllocatorModel allocator(100 * kMebibyte, /*expandable_segments=*/true);
  const int64_t a = allocator.allocate(60 * kMebibyte);
  const int64_t b = allocator.allocate(20 * kMebibyte);
  CHECK(allocator.reserved_bytes() == 80 * kMebibyte);
  allocator.release(a);
  // 60 MiB free at the front; a 70 MiB request does not fit it, and mapping 70
  // more would pass 100: the free 60 MiB are unmapped, then 70 are mapped after b.
  CHECK(allocator.allocate(70 * kMebibyte) >= 0);
  CHECK(allocator.reserved_bytes() == 20 * kMebibyte + 80 * kMebibyte);
  CHECK(allocator.allocate(40 * kMebibyte) < 0);  // nothing left to unmap
  allocator.release(b);
}

}  // namespace headroom::planner
