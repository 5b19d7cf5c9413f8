// Unit conversions at the edge: the only place where byte counts become GiB/GB
// text and where size text ("24GiB") becomes bytes. Inside, bytes are int64 and
// times are milliseconds (double). Memory is shown in GiB (2^30, as nvidia-smi's
// MiB are binary); disk may be shown in GB (10^9, as drives are sold).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace headroom::reports {

inline constexpr int64_t kKiB = int64_t{1} << 10;
inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;

// "40.0 GiB": bytes in GiB with one decimal. Negative values keep their sign.
std::string format_gib(int64_t bytes);
// "40.0": the number format_gib prints, without the unit.
std::string gib_number(int64_t bytes);
// "500.0 GB": bytes in GB (1e9) with one decimal, for disk.
std::string format_gb(int64_t bytes);
// "1234.5 ms" below 100 s, "123.4 s" above.
std::string format_ms(double ms);
// "8.03 B", "124.4 M", "7,168": a parameter or token count.
std::string format_count(int64_t count);
// "12,345": digits grouped by thousands.
std::string group_thousands(int64_t value);
// "41%": a fraction 0..1 as a whole percentage ("5%" for 0.05, "2.5%" for 0.025).
std::string format_percent(double fraction);
// A number with a fixed count of decimals ("%.*f").
std::string fixed(double value, int decimals);

// Parses a memory or disk size: a plain byte count ("51539607552") or a number
// with a unit, binary KiB/MiB/GiB/TiB or decimal KB/MB/GB/TB (also "B"),
// units case-insensitive, an optional space before the unit, decimals allowed
// ("1.5GiB"). Rejects empty text, negative or zero sizes, unknown units and
// sizes over 2^60 bytes; the message says what was expected.
Result<int64_t> parse_size(std::string_view text);

}  // namespace headroom::reports
