#include "executor/cpu_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>

namespace headroom::executor {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_rounding{1};

struct Tracked {
  c10::DataPtr original;
  int64_t bytes;
};

void release_tracked(void* context) {
  auto* tracked = static_cast<Tracked*>(context);
  g_live -= tracked->bytes;
  delete tracked;  // frees the original allocation through its own deleter
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr original = base_->allocate(bytes);
    void* data = original.get();
    const c10::Device device = original.device();
    const int64_t round = g_rounding.load();
    const int64_t counted = (static_cast<int64_t>(bytes) + round - 1) / round * round;
    auto* tracked = new Tracked{std::move(original), counted};
    const int64_t live = g_live += counted;
    int64_t peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
    }
    return {data, tracked, &release_tracked, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

 private:
  c10::Allocator* base_;
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
