// The PyTorch CUDA caching allocator's size rules (c10/cuda/CUDACachingAllocator.cpp):
// every request is rounded up to a multiple of 512 bytes (kMinBlockSize); requests
// up to 1 MiB (kSmallSize) are carved from 2 MiB segments (kSmallBuffer); requests
// below 10 MiB (kMinLargeAlloc) from 20 MiB segments (kLargeBuffer); larger ones
// get their own segment rounded up to 2 MiB (kRoundLarge).
#pragma once

#include <cstdint>

namespace headroom::planner {

inline constexpr int64_t kMinBlockBytes = 512;
inline constexpr int64_t kSmallRequestBytes = 1LL << 20;
inline constexpr int64_t kSmallSegmentBytes = 2LL << 20;
inline constexpr int64_t kLargeSegmentBytes = 20LL << 20;
inline constexpr int64_t kMinLargeAllocBytes = 10LL << 20;
inline constexpr int64_t kRoundLargeBytes = 2LL << 20;

inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// What torch.cuda.memory_allocated counts for one tensor of `bytes`.
inline int64_t allocated_bytes(int64_t bytes) {
  if (bytes <= 0) return 0;
  return round_up(bytes, kMinBlockBytes);
}

// The size the allocator serves for a request (round_size(): at least 512 B).
inline int64_t allocated_bytes_for_request(int64_t bytes) {
  return bytes <= 0 ? kMinBlockBytes : round_up(bytes, kMinBlockBytes);
}

// What one tensor of `bytes` takes of reserved memory when it lives in its own
// segment (large requests) or packed into a shared pool segment (small ones).
inline int64_t reserved_bytes(int64_t bytes) {
  if (bytes <= 0) return 0;
  if (bytes >= kMinLargeAllocBytes) return round_up(bytes, kRoundLargeBytes);
  return allocated_bytes(bytes);
}

// Slack of the partly used pool segments: at most one 2 MiB small segment and one
// 20 MiB large segment are partially filled at the peak in a steady step.
inline constexpr int64_t kPoolSlackBytes = kSmallSegmentBytes + kLargeSegmentBytes;

}  // namespace headroom::planner
