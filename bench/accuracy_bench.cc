// Accuracy against published GPU measurements (issue 10, item 3): predicts
// every expressible case of bench/accuracy/published_dev_cases.json as
// translated in bench/accuracy/translations.json, compares the predicted
// quantity that matches each published metric, prints the report as markdown
// and writes it to docs/results/accuracy.md. It measures; it fits nothing.
//
//   accuracy_bench [--cases FILE] [--translations FILE] [--out FILE]
//
// Exit status: 0 done; 1 bad arguments or input (the message names the file,
// the case and the field); 2 headroom refused the settings of a case the
// translation calls expressible; 3 the report could not be written; 4 the
// cases do not add up (a case neither predicted nor listed with a reason).
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "bench/accuracy/accuracy_inputs.h"
#include "bench/accuracy/accuracy_report.h"
#include "bench/accuracy/case_comparison.h"
#include "graph/atomic_file.h"

namespace {

using headroom::bench::BenchCase;
using headroom::bench::CaseOutcome;

struct Arguments {
  std::string cases = HEADROOM_ACCURACY_DIR "/published_dev_cases.json";
  std::string translations = HEADROOM_ACCURACY_DIR "/translations.json";
  std::string out = HEADROOM_SOURCE_DIR "/docs/results/accuracy.md";
};

constexpr std::string_view kUsage =
    "usage: accuracy_bench [--cases FILE] [--translations FILE] [--out FILE]\n"
    "  defaults: " HEADROOM_ACCURACY_DIR "/published_dev_cases.json, " HEADROOM_ACCURACY_DIR
    "/translations.json,\n            " HEADROOM_SOURCE_DIR "/docs/results/accuracy.md\n";

// Returns false (after a message) on a bad argument; sets `help` for --help.
bool parse_arguments(int argc, char** argv, Arguments& out, bool& help) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help = true;
      return true;
    }
    std::string* target = arg == "--cases"          ? &out.cases
                          : arg == "--translations" ? &out.translations
                          : arg == "--out"          ? &out.out
                                                    : nullptr;
    if (!target || i + 1 >= argc) {
      std::cerr << "accuracy_bench: " << (target ? "missing a file after " : "unknown argument ")
                << arg << "\n"
                << kUsage;
      return false;
    }
    *target = argv[++i];
  }
  return true;
}

// Paths inside the source tree are shown relative to it, so the report does
// not depend on where the tree is checked out.
std::string shown_path(const std::string& path) {
  const std::string root = HEADROOM_SOURCE_DIR "/";
  return path.starts_with(root) ? path.substr(root.size()) : path;
}

// Every case is predicted or listed with a reason, and every published quantity
// of a predicted case is compared or has a reason why not.
bool counts_add_up(const std::vector<BenchCase>& cases, const std::vector<CaseOutcome>& outcomes) {
  if (outcomes.size() != cases.size()) return false;
  for (const CaseOutcome& o : outcomes) {
    const bool listed = !o.predicted && !o.bench_case->gaps.empty();
    const bool accounted = o.predicted && (o.memory_error || !o.memory_not_compared.empty()) &&
                           (o.time_error || !o.time_not_compared.empty());
    if (!listed && !accounted) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Arguments args;
  bool help = false;
  if (!parse_arguments(argc, argv, args, help)) return 1;
  if (help) {
    std::cout << kUsage;
    return 0;
  }
  headroom::Result<std::vector<BenchCase>> cases =
      headroom::bench::load_bench_cases(args.cases, args.translations);
  if (!cases.is_ok()) {
    std::cerr << "accuracy_bench: " << cases.message() << "\n";
    return 1;
  }
  std::vector<CaseOutcome> outcomes;
  for (const BenchCase& bench_case : cases.value()) {
    if (!bench_case.settings) {
      outcomes.push_back(headroom::bench::unpredicted_case(bench_case));
      continue;
    }
    headroom::Result<headroom::planner::Prediction> prediction =
        headroom::bench::predict_settings(*bench_case.settings);
    if (!prediction.is_ok()) {
      std::cerr << "accuracy_bench: " << args.translations << ": " << bench_case.id
                << ": headroom refused the translated settings (mark the case \"no\" with this "
                   "reason, or fix it): "
                << prediction.message() << "\n";
      return 2;
    }
    outcomes.push_back(headroom::bench::compare_case(bench_case, prediction.value()));
  }
  if (!counts_add_up(cases.value(), outcomes)) {
    std::cerr << "accuracy_bench: some case is neither predicted nor listed with a reason\n";
    return 4;
  }
  const std::string report = headroom::bench::render_accuracy_markdown(
      outcomes, {shown_path(args.cases), shown_path(args.translations)});
  std::cout << report;
  const headroom::Status written = headroom::graph::write_file_atomic(args.out, report);
  if (!written.is_ok()) {
    std::cerr << "accuracy_bench: " << written.message() << "\n";
    return 3;
  }
  std::cerr << "accuracy_bench: wrote " << args.out << "\n";
  return 0;
}
