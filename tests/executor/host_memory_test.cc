// The host-memory check the trainer makes before building anything (issue 14:
// a model larger than host RAM was OOM-killed without a word).
#include "executor/host_memory.h"

#include <doctest/doctest.h>

#include <string>

namespace headroom::executor {

TEST_CASE("MemAvailable is read from /proc/meminfo's text") {
  CHECK(mem_available_bytes("MemTotal:       32768000 kB\nMemFree:  100 kB\nMemAvailable:   23617948 kB\n") ==
        int64_t{23617948} * 1024);
  CHECK_FALSE(mem_available_bytes("MemTotal: 1 kB\n").has_value());
  CHECK_FALSE(mem_available_bytes("MemAvailable: lots\n").has_value());
  CHECK_FALSE(mem_available_bytes("").has_value());
}

TEST_CASE("this machine's available memory is a positive figure") {
  Result<int64_t> available = available_host_bytes();
  REQUIRE_MESSAGE(available.is_ok(), available.message());
  CHECK(available.value() > 0);
}

TEST_CASE("a need above what is available is refused with both figures") {
  CHECK(check_host_memory(int64_t{1} << 30, int64_t{2} << 30, "this plan").is_ok());
  const Status refused = check_host_memory(int64_t{40} << 30, int64_t{16} << 30, "this plan");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("host memory: this plan needs about 40.0 GiB, but 16.0 GiB is available") == 0);
  CHECK(refused.message().find("nothing was built or trained") != std::string::npos);
}

}  // namespace headroom::executor
