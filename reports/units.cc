#include "reports/units.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace headroom::reports {
namespace {

constexpr double kGb = 1e9;  // disk: decimal gigabytes, as drives and `df -H` count
// Sizes above this are surely typos (an exabyte); it also keeps int64 arithmetic safe.
constexpr double kMaxSizeBytes = static_cast<double>(int64_t{1} << 60);

struct SizeUnit {
  std::string_view name;  // lower case
  double bytes;
};

constexpr std::array<SizeUnit, 9> kSizeUnits = {{
    {"b", 1.0},
    {"kib", 1024.0},
    {"mib", 1024.0 * 1024},
    {"gib", 1024.0 * 1024 * 1024},
    {"tib", 1024.0 * 1024 * 1024 * 1024},
    {"kb", 1e3},
    {"mb", 1e6},
    {"gb", 1e9},
    {"tb", 1e12},
}};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Status size_error(std::string_view text, std::string_view why) {
  return Status::invalid_input(
      "'" + std::string(text) + "': " + std::string(why) +
      " (expected a positive size such as 24GiB, 48GB, 49140MiB or a byte count)");
}

}  // namespace

std::string fixed(double value, int decimals) {
  std::array<char, 64> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%.*f", decimals, value);
  return buffer.data();
}

std::string gib_number(int64_t bytes) {
  return fixed(static_cast<double>(bytes) / static_cast<double>(kGiB), 1);
}

std::string format_gib(int64_t bytes) { return gib_number(bytes) + " GiB"; }

std::string format_gb(int64_t bytes) { return fixed(static_cast<double>(bytes) / kGb, 1) + " GB"; }

std::string format_ms(double ms) {
  if (ms >= 100'000.0) return fixed(ms / 1000.0, 1) + " s";
  return fixed(ms, 1) + " ms";
}

std::string group_thousands(int64_t value) {
  const bool negative = value < 0;
  std::string digits = std::to_string(negative ? -value : value);
  std::string out;
  const int first = static_cast<int>(digits.size() % 3);
  for (int i = 0; i < static_cast<int>(digits.size()); ++i) {
    if (i > 0 && (i - first) % 3 == 0) out += ',';
    out += digits[static_cast<size_t>(i)];
  }
  return negative ? "-" + out : out;
}

std::string format_count(int64_t count) {
  const double value = static_cast<double>(count);
  if (std::fabs(value) >= 1e9) return fixed(value / 1e9, 2) + " B";
  if (std::fabs(value) >= 1e6) return fixed(value / 1e6, 1) + " M";
  return group_thousands(count);
}

std::string format_percent(double fraction) {
  const double percent = fraction * 100.0;
  if (std::fabs(percent - std::round(percent)) < 0.05) return fixed(std::round(percent), 0) + "%";
  return fixed(percent, 1) + "%";
}

Result<int64_t> parse_size(std::string_view text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  const std::string_view trimmed = text.substr(begin, end - begin);
  if (trimmed.empty()) return size_error(text, "empty size");
  if (trimmed.front() == '-') return size_error(text, "negative size");

  double number = 0;
  const char* first = trimmed.data();
  const char* last = trimmed.data() + trimmed.size();
  const auto [number_end, error] = std::from_chars(first, last, number, std::chars_format::fixed);
  if (error != std::errc() || number_end == first) return size_error(text, "not a number");

  std::string_view unit_text(number_end, static_cast<size_t>(last - number_end));
  while (!unit_text.empty() && unit_text.front() == ' ') unit_text.remove_prefix(1);
  double unit_bytes = 1.0;
  if (!unit_text.empty()) {
    const std::string unit = lower(unit_text);
    bool known = false;
    for (const SizeUnit& candidate : kSizeUnits) {
      if (candidate.name == unit) {
        unit_bytes = candidate.bytes;
        known = true;
      }
    }
    if (!known) return size_error(text, "unknown unit '" + std::string(unit_text) + "'");
  } else if (number != std::floor(number)) {
    return size_error(text, "a byte count must be a whole number");
  }

  const double bytes = number * unit_bytes;
  if (!std::isfinite(bytes) || bytes > kMaxSizeBytes) return size_error(text, "size too large");
  const auto rounded = static_cast<int64_t>(std::llround(bytes));
  if (rounded <= 0) return size_error(text, "size must be positive");
  return rounded;
}

}  // namespace headroom::reports
