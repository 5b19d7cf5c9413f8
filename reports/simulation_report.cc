#include "reports/simulation_report.h"

#include <sstream>

#include "reports/text_table.h"
#include "reports/units.h"

namespace headroom::reports {
namespace {

constexpr size_t kLiveRows = 10;

}  // namespace

std::string simulation_summary(const planner::Plan& plan, const planner::Simulation& s,
                               const std::string& gpu_name) {
  std::ostringstream out;
  const planner::Prediction& p = plan.prediction;
  const int64_t total = s.peak_reserved + s.cuda_context;
  out << plan.model << " on " << gpu_name << ": one optimizer step simulated ("
      << format_count(s.allocations) << " allocations, " << format_count(static_cast<int64_t>(s.events.size()))
      << " timeline events)\n";
  if (s.steps_simulated > 1) {
    out << "The optimizer makes its states at its first step(): " << s.steps_simulated << " steps replayed "
        << (s.reserved_still_growing ? "and reserved memory still grew in the last (read its reserved peak as a floor)"
                                     : "until reserved memory was steady")
        << "; the figures below are the last step's. Step 1: peak allocated " << format_gib(s.first_step_peak_allocated)
        << ", reserved " << format_gib(s.first_step_peak_reserved) << ".\n";
  }
  if (s.varied_length_micro_steps > 0) {
    out << "Batches padded to their longest sample (from " << plan.settings.shortest_sample.value_or(0) << " to "
        << plan.seq_len << " tokens): " << s.varied_length_micro_steps
        << " micro-batches of drawn lengths replayed from a fresh allocator reserved up to "
        << format_gib(s.varied_peak_reserved) << " (peak allocated " << format_gib(s.varied_peak_allocated)
        << "); the figures below keep every batch at " << plan.seq_len << " tokens.\n";
  }
  if (s.out_of_memory) {
    out << "OUT OF MEMORY at " << s.out_of_memory_at << ": an allocation fails even after the allocator releases its cache\n";
  }
  out << "\nMemory (per GPU):\n";
  TextTable memory({"", "simulated", "planner"});
  memory.set_left_aligned(0);
  memory.add_row({"peak allocated", format_gib(s.peak_allocated), format_gib(p.peak_allocated)});
  memory.add_row({"peak reserved", format_gib(s.peak_reserved), format_gib(p.peak_reserved)});
  memory.add_row({"fragmentation (reserved - allocated)", format_gib(s.peak_reserved - s.peak_allocated), ""});
  memory.add_row({"with CUDA context", format_gib(total), format_gib(p.gpu_total)});
  memory.add_row({"budget", format_gib(p.gpu_budget), format_gib(p.gpu_budget)});
  out << memory.render();
  out << "The allocation peak happens at " << fixed(s.peak_time_ms, 1) << " ms, at " << s.peak_label << " ("
      << s.segments_at_peak << " segments reserved then; reserved memory only grows, the allocator caches).\n";
  out << "\nLive at the peak:\n";
  TextTable live({"what", "memory"});
  live.set_left_aligned(0);
  int64_t rest = 0;
  for (size_t i = 0; i < s.live_at_peak.size(); ++i) {
    if (i < kLiveRows) {
      live.add_row({s.live_at_peak[i].name, format_gib(s.live_at_peak[i].bytes)});
    } else {
      rest += s.live_at_peak[i].bytes;
    }
  }
  if (rest > 0) live.add_row({"everything else", format_gib(rest)});
  // torch.cuda counts whole blocks: a large-pool block is not split for a remainder of
  // 1 MiB or less (CUDACachingAllocator.cpp should_split), and that tail is allocated too.
  int64_t tensors = 0;
  for (const planner::LiveItem& item : s.live_at_peak) tensors += item.bytes;
  if (s.peak_allocated > tensors) live.add_row({"unsplit blocks' tails", format_gib(s.peak_allocated - tensors)});
  out << live.render();
  const planner::TimeBreakdown& t = s.time;
  out << "\nTime (one optimizer step):\n";
  TextTable time({"", "ms"});
  time.set_left_aligned(0);
  time.add_row({"forward", format_ms(t.forward_ms)});
  time.add_row({"backward", format_ms(t.backward_ms)});
  time.add_row({"recompute", format_ms(t.recompute_ms)});
  time.add_row({"exposed offload copies", format_ms(t.offload_exposed_ms)});
  time.add_row({"exposed communication", format_ms(t.comm_exposed_ms)});
  time.add_row({"optimizer", format_ms(t.optimizer_ms)});
  time.add_row({"step", format_ms(t.step_ms)});
  out << time.render();
  out << "Throughput: " << fixed(t.samples_per_s, 2) << " samples/s, " << group_thousands(static_cast<int64_t>(t.tokens_per_s))
      << " tokens/s, MFU " << format_percent(t.mfu) << "\n";
  return out.str();
}

}  // namespace headroom::reports
