#include "cli/train_command.h"

#include "cli/run_request.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/atomic_file.h"
#include "planner/predict/plan_file.h"
#include "planner/time/calibration.h"
#include "reports/text_table.h"
#include "reports/units.h"

namespace headroom::cli {
namespace {

nlohmann::json step_to_json(const executor::StepMetrics& m) {
  nlohmann::json line = {{"step", m.step},
                         {"loss", m.loss},
                         {"step_ms", m.step_ms},
                         {"tokens_per_s", m.tokens_per_s},
                         {"peak_allocated_bytes", m.peak_allocated},
                         {"peak_reserved_bytes", m.peak_reserved},
                         {"loss_scale", m.loss_scale},
                         {"skipped", m.skipped}};
  if (!m.ranks.empty()) {
    nlohmann::json ranks = nlohmann::json::array();
    for (size_t r = 0; r < m.ranks.size(); ++r) {
      ranks.push_back({{"rank", r},
                       {"peak_allocated_bytes", m.ranks[r].peak_allocated},
                       {"peak_reserved_bytes", m.ranks[r].peak_reserved}});
    }
    line["ranks"] = std::move(ranks);
  }
  return line;
}

// GiB, or MiB below 1 GiB (tiny models on a CPU).
std::string memory(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return reports::format_gib(bytes);
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return out.str();
}

// --metrics FILE: one JSON line per step, appended. Every line is checked, so
// a file that cannot be written (a full disk) stops the run rather than
// leaving a metrics file that silently ends early.
class MetricsFile {
 public:
  ~MetricsFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status open(const std::string& path) {
    Result<int> fd = graph::open_for_appending(path);
    if (!fd.is_ok()) return fd.status().with_prefix("--metrics ");
    fd_ = fd.value();
    path_ = path;
    return Status::ok();
  }
  bool is_open() const { return fd_ >= 0; }
  Status append(const std::string& line) {
    if (int error = graph::write_all(fd_, line); error != 0) {
      return Status::io("--metrics " + path_ + ": cannot write: " + std::strerror(error));
    }
    return Status::ok();
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// Progress on stderr (a bar that rewrites itself on a terminal, a line per
// step otherwise) and, with --metrics, one JSON object per step.
class ProgressObserver final : public executor::RunObserver {
 public:
  ProgressObserver(Terminal& terminal, MetricsFile* metrics) : terminal_(terminal), metrics_(metrics) {}

  void on_start(const std::string& device, int64_t first_step, int64_t total_steps) override {
    terminal_.err << "training on " << device << ": steps " << first_step << "-" << total_steps << "\n";
  }

  Status on_step(const executor::StepMetrics& m) override {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * m.step / std::max<int64_t>(1, m.total_steps));
    std::ostringstream line;
    line << "step " << m.step << "/" << m.total_steps << " [" << std::string(filled, '#')
         << std::string(kWidth - filled, '.') << "] loss " << std::fixed << std::setprecision(4) << m.loss << "  "
         << std::setprecision(0) << m.tokens_per_s << " tok/s  peak " << memory(m.peak_allocated)
         << (m.skipped ? "  (skipped: inf/NaN gradients)" : "");
    if (terminal_.progress) {
      terminal_.err << "\r" << line.str() << "   " << std::flush;
      if (m.step == m.total_steps) terminal_.err << "\n";
    } else {
      terminal_.err << line.str() << "\n";
    }
    if (metrics_) return metrics_->append(step_to_json(m).dump() + "\n");
    return Status::ok();
  }

  void on_checkpoint(int64_t step, const std::string& path) override {
    if (terminal_.progress) terminal_.err << "\n";
    terminal_.err << "checkpoint of step " << step << " written to " << path << "\n";
  }

 private:
  Terminal& terminal_;
  MetricsFile* metrics_;
};

// 1,234,567 B: exact, since the rows are compared to the byte.
std::string exact_bytes(int64_t bytes) {
  std::string digits = std::to_string(bytes < 0 ? -bytes : bytes);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return (bytes < 0 ? "-" : "") + digits + " B";
}

std::string format_error(double relative) {
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100.0 * relative << " %";
  return out.str();
}

void print_summary(const executor::RunResult& r, Terminal& terminal) {
  const auto& steps = r.measured.steps;
  if (!steps.empty()) {
    terminal.out << "Trained steps " << r.first_step << "-" << r.last_step << " on " << r.measured.device
                 << (r.resumed_from.empty() ? "" : " (resumed from " + r.resumed_from + ")") << ": loss "
                 << std::fixed << std::setprecision(4) << steps.front().loss << " -> " << steps.back().loss
                 << ", median step " << std::setprecision(1) << r.measured.median_step_ms() << " ms\n";
  }
  if (!r.categories.empty()) {
    reports::TextTable table({"memory (first step)", "predicted", "measured", "error"});
    table.set_left_aligned(0);
    for (const executor::CategoryCheck& c : r.categories) {
      table.add_row({c.rank >= 0 ? c.category + " (rank " + std::to_string(c.rank) + ")" : c.category,
                     exact_bytes(c.predicted), exact_bytes(c.measured),
                     format_error(c.relative_error())});
    }
    terminal.out << "\nPredicted vs measured (bytes as torch.cuda.memory_allocated counts them):\n"
                 << table.render();
  }
  for (const std::string& path : r.checkpoints_written) terminal.out << "checkpoint: " << path << "\n";
  for (const std::string& note : r.notes) terminal.out << "note: " << note << "\n";
}

nlohmann::json result_to_json(const executor::RunResult& r) {
  nlohmann::json categories = nlohmann::json::array();
  for (const executor::CategoryCheck& c : r.categories) {
    nlohmann::json row = {{"category", c.category},
                          {"predicted_bytes", c.predicted},
                          {"measured_bytes", c.measured},
                          {"relative_error", c.relative_error()}};
    if (c.rank >= 0) row["rank"] = c.rank;
    categories.push_back(row);
  }
  return {{"command", "run"},
          {"world_size", r.world_size},
          {"first_step", r.first_step},
          {"last_step", r.last_step},
          {"resumed_from", r.resumed_from},
          {"checkpoints", r.checkpoints_written},
          {"categories", categories},
          {"notes", r.notes},
          {"measurement", planner::measured_run_to_json(r.measured)}};
}

}  // namespace

int run_training(const CliOptions& options, Terminal& terminal) {
  RunRequest request = check_run_request(options, terminal, executor::cuda_available());
  if (request.exit_code != 0) return request.exit_code;
  const executor::RunOptions& run = options.run;
  const planner::Plan& plan = request.plan;
  MetricsFile metrics;
  if (!options.metrics_path.empty()) {
    if (Status s = metrics.open(options.metrics_path); !s.is_ok()) return fail(terminal, s);
  }
  ProgressObserver observer(terminal, metrics.is_open() ? &metrics : nullptr);
  Result<executor::RunResult> result = executor::train_plan(plan, run, observer);
  if (!result.is_ok()) return fail(terminal, result.status());
  // A job of several ranks reports once, from rank 0 (its rows cover every rank).
  if (result->rank != 0) return kExitOk;

  if (!options.measurement_out.empty()) {
    const std::string out = planner::measured_run_to_json(result->measured).dump(2) + "\n";
    if (Status s = graph::write_file_atomic(options.measurement_out, out); !s.is_ok()) {
      return fail(terminal, s.with_prefix("--measurement-out: "));
    }
  }
  if (!options.calibration_out.empty()) {
    if (!result->calibration) {
      return fail(terminal,
                  Status::unsupported(
                      "--write-calibration " + options.calibration_out +
                      ": not written, a calibration needs a run on a GPU (this one ran on " +
                      result->measured.device + ")"));
    }
    const std::string out = planner::calibration_to_json(*result->calibration).dump(2) + "\n";
    if (Status s = graph::write_file_atomic(options.calibration_out, out); !s.is_ok()) {
      return fail(terminal, s.with_prefix("--write-calibration: "));
    }
  }
  if (options.json) {
    terminal.out << result_to_json(result.value()).dump(2) << "\n";
  } else {
    print_summary(result.value(), terminal);
  }
  return kExitOk;
}

}  // namespace headroom::cli
