// The caching-allocator model against the rules of PyTorch's
// c10/cuda/CUDACachingAllocator.cpp (default configuration).
#include <doctest/doctest.h>

#include "planner/caching_allocator.h"

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
