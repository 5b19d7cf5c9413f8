// The accuracy report as markdown: the summary, one table per compared
// quantity, the cases not predicted with their reasons, the gaps by frequency,
// and where the reference measurement itself is uncertain. The bench prints it
// and writes it to docs/results/accuracy.md; the text depends only on the
// inputs, so the file changes only when the inputs or the planner do.
#pragma once

#include <string>
#include <vector>

#include "bench/accuracy/case_comparison.h"

namespace headroom::bench {

struct ReportSources {
  std::string cases_file;  // as shown in the report, e.g. "bench/accuracy/published_dev_cases.json"
  std::string translations_file;
};

std::string render_accuracy_markdown(const std::vector<CaseOutcome>& outcomes,
                                     const ReportSources& sources);

}  // namespace headroom::bench
