// A validating reader of safetensors headers: exact tensor names, dtypes and
// shapes of a checkpoint without reading its weights. Format (huggingface/
// safetensors): an 8-byte little-endian header length N, N bytes of UTF-8 JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
//  "__metadata__": {"k": "v"}}, then the byte buffer the offsets index.
// Also reads a sharded checkpoint's model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/dtype.h"
#include "graph/status.h"

namespace headroom::graph {

inline constexpr int64_t kMaxSafetensorsHeaderBytes = 100LL << 20;  // as the reference reader

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets into the data buffer
  int64_t end = 0;
  std::string file;   // the file holding it

  int64_t elements() const;
};

// Rejects (with a message naming the file and the tensor): a header length past
// the end of the file or over 100 MiB; JSON that is invalid, not UTF-8, nested
// too deep or has duplicate keys; unknown dtypes; negative or overflowing shapes;
// offsets out of the data buffer, not matching dtype x elements, overlapping,
// or leaving holes (the buffer must be indexed completely).
Result<std::vector<SafetensorsEntry>> read_safetensors_header(const std::string& path);

// The same checks on bytes in memory: `prefix` holds the start of a file of
// `file_size` bytes (at least the 8-byte length and the header). For fuzzing.
Result<std::vector<SafetensorsEntry>> parse_safetensors_header(std::string_view prefix, int64_t file_size,
                                                               const std::string& origin);

// A sharded checkpoint: reads the index's "weight_map" and every shard it names
// (relative to the index's directory); a tensor the index names that its shard
// lacks, or one that is in two shards, is an error.
Result<std::vector<SafetensorsEntry>> read_safetensors_index(const std::string& index_path);

}  // namespace headroom::graph
