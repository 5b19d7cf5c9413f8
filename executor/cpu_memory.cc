#include "executor/cpu_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace headroom::executor {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_rounding{1};

// What the base allocator handed out, keyed by the data pointer. The DataPtr we
// return has context == data, as c10::Allocator::raw_allocate asserts
// (c10/core/Allocator.h) and as LibTorch's own caching allocators do it: oneDNN's
// kernels on AMX / avx512_bf16 CPUs allocate through raw_allocate and free
// through raw_deleter, so the size must be found from the pointer alone.
struct Tracked {
  c10::DataPtr original;  // frees through the base allocator's deleter
  int64_t counted_bytes;
};

class AllocationTable {
 public:
  void insert(void* data, Tracked tracked) {
    std::lock_guard<std::mutex> lock(mutex_);
    table_.emplace(data, std::move(tracked));
  }

  // Removes `data` and returns what was recorded; false when it is not ours
  // (allocated before the tracker was installed).
  bool take(void* data, Tracked& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = table_.find(data);
    if (it == table_.end()) return false;
    out = std::move(it->second);
    table_.erase(it);
    return true;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<void*, Tracked> table_;
};

AllocationTable& table() {
  static auto* instance = new AllocationTable;  // never destroyed: frees may come during static destruction
  return *instance;
}

c10::Allocator*& base_allocator() {
  static c10::Allocator* base = nullptr;
  return base;
}

void release_by_pointer(void* data) {
  Tracked tracked;
  if (table().take(data, tracked)) {
    g_live -= tracked.counted_bytes;
    return;  // `tracked.original` frees the memory as it goes out of scope
  }
  // Not ours: a raw allocation made before installation. Free it as its owner would.
  if (c10::DeleterFnPtr deleter = base_allocator()->raw_deleter()) deleter(data);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) { base_allocator() = base; }

  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr original = base_allocator()->allocate(bytes);
    void* data = original.get();
    if (data == nullptr) return original;  // zero bytes: nothing to count, and nullptr is not a unique key
    const c10::Device device = original.device();
    const int64_t round = g_rounding.load();
    const int64_t counted = (static_cast<int64_t>(bytes) + round - 1) / round * round;
    table().insert(data, Tracked{std::move(original), counted});
    const int64_t live = g_live += counted;
    int64_t peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
    }
    return {data, data, &release_by_pointer, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release_by_pointer; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

}  // namespace

CpuMemoryTracker& CpuMemoryTracker::install() {
  static CpuMemoryTracker tracker;
  static TrackingAllocator allocator(c10::GetCPUAllocator());
  static const bool installed = [] {
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    return true;
  }();
  (void)installed;
  return tracker;
}

int64_t CpuMemoryTracker::live_bytes() const { return g_live.load(); }
int64_t CpuMemoryTracker::peak_bytes() const { return g_peak.load(); }
void CpuMemoryTracker::reset_peak() { g_peak = g_live.load(); }
void CpuMemoryTracker::set_rounding(int64_t bytes) { g_rounding = bytes > 0 ? bytes : 1; }

}  // namespace headroom::executor
