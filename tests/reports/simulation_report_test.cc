#include "reports/simulation_report.h"

#include <doctest/doctest.h>

#include <string>

#include "reports/units.h"

namespace headroom::reports {
namespace {

// A hand-made simulation whose allocated peak holds 0.5 GiB more than its live tensors:
// the large-pool blocks the allocator left unsplit.
planner::Simulation simulation_with_tails(int64_t tails) {
  planner::Simulation s;
  s.live_at_peak = {{"parameters", 4 * kGiB}, {"gradients", 2 * kGiB}};
  s.peak_live = 6 * kGiB;
  s.peak_allocated = s.peak_live + tails;
  s.peak_reserved = s.peak_allocated + kGiB;
  s.peak_label = "backward model.embed_tokens";
  return s;
}

}  // namespace

// torch.cuda counts a block left unsplit whole; the live table says where the rest of the
// allocated peak is, so that its rows add up to it.
TEST_CASE("simulate's live table names the unsplit blocks' tails, and only when there are some") {
  planner::Plan plan;
  plan.model = "m";
  const std::string with = simulation_summary(plan, simulation_with_tails(kGiB / 2), "GPU");
  CHECK(with.find("unsplit blocks' tails") != std::string::npos);
  CHECK(with.find("0.5 GiB") != std::string::npos);
  const std::string without = simulation_summary(plan, simulation_with_tails(0), "GPU");
  CHECK(without.find("unsplit blocks' tails") == std::string::npos);
}

}  // namespace headroom::reports
