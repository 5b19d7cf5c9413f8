// The figures the accuracy report leads with: median |error|, how many cases
// are under-predicted by more than 5% (the error that lets a run OOM after it
// was declared to fit), the worst under- and over-prediction, and how many
// cases headroom can express exactly.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench/accuracy/case_comparison.h"

namespace headroom::bench {

enum class Quantity { kMemory, kTime };

struct ErrorSummary {
  int cases = 0;                // cases in scope
  int compared = 0;             // cases with a compared error
  double median_abs_error = 0;  // fraction
  int under_5_percent = 0;      // error < -5%
  std::string worst_under_id;   // empty when nothing is under-predicted
  double worst_under = 0;
  std::string worst_over_id;  // empty when nothing is over-predicted
  double worst_over = 0;
};

struct ExpressibleCounts {
  int cases = 0;
  int exact = 0;
  int approximate = 0;
  int no = 0;
  // Of the approximate and no cases: those some unpublished information keeps from
  // exact, and those only headroom's missing mechanisms do.
  int missing_information = 0;
  int missing_feature = 0;
};

ErrorSummary summarize_errors(const std::vector<CaseOutcome>& outcomes, Quantity quantity,
                              bool high_trust_only);
ExpressibleCounts count_expressible(const std::vector<CaseOutcome>& outcomes, bool high_trust_only);

// Step-time errors of the cases run on one GPU model, on one GPU or on several.
struct TimeErrorGroup {
  std::string gpu;     // the translation's catalogue id
  bool multi_gpu = false;
  int compared = 0;
  double median_error = 0;      // signed fraction: negative, headroom predicts a faster run
  double median_abs_error = 0;  // fraction
  int under = 0;                // predicted faster than measured
};
// The groups in order of GPU id, one GPU before several.
std::vector<TimeErrorGroup> time_errors_by_gpu(const std::vector<CaseOutcome>& outcomes);

// Each gap with the number of cases that name it, most frequent first (ties by name).
std::vector<std::pair<std::string, int>> gaps_by_frequency(
    const std::vector<CaseOutcome>& outcomes);

}  // namespace headroom::bench
