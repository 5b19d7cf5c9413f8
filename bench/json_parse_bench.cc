// Parse time of JSON inputs against their number of entries: a safetensors
// header of 20k and 80k tensors and a measurement file of 100k and 400k memory
// samples, each read through headroom's own reader (graph/json_text.h). The
// parse must be linear (issue 14: nlohmann's callback parser made it quadratic,
// 23.5 s for 40k tensors), so each pair's time ratio is near 4 (6 to 7 for the
// header here: its name map and the cache add a little). Prints the figures;
// exits 1 when a ratio exceeds 10 (a quadratic parse shows 16).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/json_text.h"
#include "graph/safetensors_header.h"
#include "planner/predict/measurement.h"

namespace {

using Clock = std::chrono::steady_clock;

// A safetensors file prefix (8-byte length + header) of `tensors` BF16 tensors
// of 64 elements each, and the size of the whole file.
std::string safetensors_prefix(int tensors, int64_t& file_size) {
  std::string header = "{";
  int64_t offset = 0;
  for (int i = 0; i < tensors; ++i) {
    header += (i ? "," : "") + std::string("\"model.layers.") + std::to_string(i / 16) + ".weight_" +
              std::to_string(i % 16) + "\":{\"dtype\":\"BF16\",\"shape\":[8,8],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + 128) + "]}";
    offset += 128;
  }
  header += "}";
  std::string prefix(8, '\0');
  for (int b = 0; b < 8; ++b) prefix[b] = static_cast<char>((header.size() >> (8 * b)) & 0xff);
  file_size = 8 + static_cast<int64_t>(header.size()) + offset;
  return prefix + header;
}

std::string measurement_text(int samples) {
  std::string text = R"({"format": "headroom.measurement", "version": 1, "steps": [{"step": 1,
    "peak_allocated_bytes": 1, "peak_reserved_bytes": 2, "step_ms": 1}], "memory": [)";
  for (int i = 0; i < samples; ++i) {
    text += (i ? "," : "") + std::string("{\"time_ms\":") + std::to_string(i) +
            ",\"allocated_bytes\":1000,\"reserved_bytes\":2000}";
  }
  return text + "]}";
}

// Best of five runs, in milliseconds.
template <typename F>
double time_ms(F&& run) {
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    const auto start = Clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return best;
}

double safetensors_ms(int tensors) {
  int64_t file_size = 0;
  const std::string prefix = safetensors_prefix(tensors, file_size);
  return time_ms([&] {
    const auto entries = headroom::graph::parse_safetensors_header(prefix, file_size, "bench.safetensors");
    if (!entries.is_ok() || entries->size() != static_cast<size_t>(tensors)) {
      std::fprintf(stderr, "json_parse_bench: %s\n", entries.is_ok() ? "wrong count" : entries.message().c_str());
      std::exit(2);
    }
  });
}

double measurement_ms(int samples) {
  const std::string text = measurement_text(samples);
  return time_ms([&] {
    const auto json = headroom::graph::parse_json_text(text, "bench.json");
    const auto run = json.is_ok() ? headroom::planner::measured_run_from_json(json.value(), "bench.json")
                                  : headroom::Result<headroom::planner::MeasuredRun>(json.status());
    if (!run.is_ok() || run->memory.size() != static_cast<size_t>(samples)) {
      std::fprintf(stderr, "json_parse_bench: %s\n", run.is_ok() ? "wrong count" : run.message().c_str());
      std::exit(2);
    }
  });
}

}  // namespace

int main() {
  bool linear = true;
  // Four times the entries: linear parsing takes about 4x as long, quadratic 16x.
  // The threshold of 10 sits between them with room for a loaded machine, where a
  // 2x step (ratio 2 vs 4, threshold 3) failed under load while the parse stayed linear.
  auto report = [&](const char* what, int small, double small_ms, int large, double large_ms) {
    const double ratio = large_ms / small_ms;
    std::printf("%-28s %7d: %9.1f ms   %7d: %9.1f ms   ratio %.2f\n", what, small, small_ms, large, large_ms, ratio);
    linear = linear && ratio <= 10.0;
  };
  report("safetensors header tensors", 20000, safetensors_ms(20000), 80000, safetensors_ms(80000));
  report("measurement memory samples", 100000, measurement_ms(100000), 400000, measurement_ms(400000));
  std::printf(linear ? "linear: every ratio <= 10 (linear: 4, quadratic: 16)\n" : "NOT LINEAR: a ratio is above 10\n");
  return linear ? 0 : 1;
}
