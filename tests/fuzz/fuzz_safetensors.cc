// libFuzzer target: the safetensors header parser. The input is the start of a
// file; its claimed total size is the input size plus a fuzzed tail length.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "graph/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int64_t tail = static_cast<int64_t>(data[0]) << (data[1] % 40);
  const std::string_view prefix(reinterpret_cast<const char*>(data + 2), size - 2);
  (void)headroom::graph::parse_safetensors_header(prefix, static_cast<int64_t>(prefix.size()) + tail,
                                                  "fuzz.safetensors");
  return 0;
}
