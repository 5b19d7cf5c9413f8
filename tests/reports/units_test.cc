#include "reports/units.h"

#include <doctest/doctest.h>

#include <string>

namespace headroom::reports {
namespace {

TEST_CASE("format_gib prints GiB with one decimal") {
  CHECK(format_gib(40 * kGiB) == "40.0 GiB");
  CHECK(format_gib(0) == "0.0 GiB");
  CHECK(format_gib(kGiB + kGiB / 2) == "1.5 GiB");
  CHECK(format_gib(-3 * kGiB) == "-3.0 GiB");
  // 49140 MiB (an RTX A6000 as nvidia-smi reports it) is 47.99 GiB.
  CHECK(format_gib(49140 * kMiB) == "48.0 GiB");
  CHECK(gib_number(10 * kGiB) == "10.0");
}

TEST_CASE("format_gb is decimal for disk") {
  CHECK(format_gb(500'000'000'000) == "500.0 GB");
  CHECK(format_gb(1'650'000'000) == "1.6 GB");
}

TEST_CASE("times, counts and percentages") {
  CHECK(format_ms(28.94) == "28.9 ms");
  CHECK(format_ms(250'000) == "250.0 s");
  CHECK(group_thousands(35388) == "35,388");
  CHECK(group_thousands(999) == "999");
  CHECK(group_thousands(1'000'000) == "1,000,000");
  CHECK(group_thousands(-1234) == "-1,234");
  CHECK(format_count(8'030'261'248) == "8.03 B");
  CHECK(format_count(124'439'808) == "124.4 M");
  CHECK(format_count(7168) == "7,168");
  CHECK(format_percent(0.05) == "5%");
  CHECK(format_percent(0.412) == "41.2%");
  CHECK(format_percent(1.0) == "100%");
}

TEST_CASE("parse_size accepts binary and decimal units and plain bytes") {
  CHECK(parse_size("24GiB").value() == 24 * kGiB);
  CHECK(parse_size("48GB").value() == 48'000'000'000);
  CHECK(parse_size("49140MiB").value() == 49140 * kMiB);
  CHECK(parse_size("51539607552").value() == 51'539'607'552);
  CHECK(parse_size("1.5 gib").value() == kGiB + kGiB / 2);
  CHECK(parse_size(" 2TB ").value() == 2'000'000'000'000);
  CHECK(parse_size("512KiB").value() == 512 * kKiB);
  CHECK(parse_size("100b").value() == 100);
}

TEST_CASE("parse_size rejects malformed, negative, zero and huge sizes") {
  for (const char* bad :
       {"", " ", "-1", "-5GB", "0", "0GiB", "abc", "GiB", "24XB", "24 G", "1.5", "1e3", "24GiBs",
        "nan", "inf", "99999999999TiB", "1180591620717411303424", "0x10"}) {
    CAPTURE(bad);
    const Result<int64_t> parsed = parse_size(bad);
    CHECK_FALSE(parsed.is_ok());
    if (!parsed.is_ok()) {
      CHECK(parsed.message().find("expected a positive size") != std::string::npos);
      CHECK(parsed.message().find(std::string("'") + bad + "'") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace headroom::reports
