// The accuracy benchmark's inputs: the published GPU measurements
// (published_dev_cases.json: shared/validation's cases copied verbatim, and those
// added here since, each with its source) and how each case is expressed in
// headroom (translations.json). Reading joins the two
// by case id and refuses anything it cannot read without guessing: a case
// without a translation, an unknown key, a metric or unit the source leaves open
// with no stated assumption. Every message names the file, the case and the field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace headroom::bench {

enum class Expressible { kExact, kApproximate, kNo };
// Why a case is not exact: some gap is information its source does not publish (no
// feature of headroom could make it exact), or every gap is a mechanism headroom lacks.
enum class Missing { kNothing, kInformation, kFeature };

// What the published memory figure counts. "active" (active_bytes.all.peak) is
// compared with peak allocated: active ~ allocated (it also counts blocks freed
// on one stream while still in use on another).
enum class MemoryMetric { kAllocated, kActive, kReserved, kNvidiaSmi };

struct MeasuredMemory {
  double bytes_per_gpu = 0;  // the published value, converted to bytes and to one GPU
  std::string as_published;  // e.g. "25.5 GiB", "148 G (sum over 2 GPUs)"
  MemoryMetric metric = MemoryMetric::kAllocated;
  std::string assumption;  // why a metric or unit was assumed; empty when the source states both
};

enum class TimeKind {
  kTokensPerSecondPerGpu,  // throughput of one GPU
  kTokensPerSecondJob,     // throughput of the whole job (all GPUs)
  kSamplesPerSecondJob,    // throughput of the whole job (all GPUs)
  kStepSeconds,            // one optimizer step (the accumulation loop and the optimizer)
};

struct MeasuredTime {
  double value = 0;  // in the unit of `kind`
  TimeKind kind = TimeKind::kStepSeconds;
  std::string key;         // the field of measured.time it was read from
  std::string assumption;  // why it was read as it was, where the source leaves it open
};

struct BenchCase {
  // Facts of the published case.
  std::string id;
  std::string trust;  // high, medium, low
  std::string trust_reason;
  int n_gpus = 1;
  std::vector<std::string> unknowns;
  std::string raw_memory;  // value and unit as published, for listings; empty when none
  std::optional<MeasuredMemory> memory;  // read only for cases headroom predicts
  std::optional<MeasuredTime> time;
  std::string time_not_comparable;  // why a published time is not compared

  // Its translation.
  std::string stack;
  std::string model;  // zoo name or resolved config.json path; empty when not expressible
  Expressible expressible = Expressible::kNo;
  std::vector<std::string> gaps;
  Missing missing = Missing::kNothing;  // kNothing exactly when exact
  std::string notes;
  std::optional<planner::RunSettings> settings;  // set when expressible
};

std::string_view expressible_name(Expressible value);
std::string_view metric_name(MemoryMetric value);

// Reads and joins both files; the cases keep the order of the published file.
Result<std::vector<BenchCase>> load_bench_cases(const std::string& cases_path,
                                                const std::string& translations_path);

}  // namespace headroom::bench
