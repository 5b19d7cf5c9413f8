// The safetensors header reader: real layouts accepted, hostile ones refused
// with a message naming the file and the tensor; the weights are never read.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "graph/safetensors_header.h"

namespace headroom::graph {
namespace {

std::string scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("headroom_st_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Writes an 8-byte little-endian length, the header text and `data_bytes` zero bytes.
std::string write_safetensors(const std::string& name, const std::string& header, int64_t data_bytes,
                              int64_t claimed_length = -1) {
  const std::string path = scratch(name);
  std::ofstream out(path, std::ios::binary);
  uint64_t length = claimed_length >= 0 ? static_cast<uint64_t>(claimed_length) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << header;
  out << std::string(static_cast<size_t>(data_bytes), '\0');
  return path;
}

std::string refusal(const std::string& name, const std::string& header, int64_t data_bytes, int64_t claimed = -1) {
  const Result<std::vector<SafetensorsEntry>> r = read_safetensors_header(write_safetensors(name, header, data_bytes, claimed));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.message().find(name) != std::string::npos);
  return r.message();
}

}  // namespace

TEST_CASE("a valid file gives names, dtypes, shapes and offsets") {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[4,8],"data_offsets":[0,64]},)"
      R"("b":{"dtype":"F32","shape":[8],"data_offsets":[64,96]}})";
  const auto r = read_safetensors_header(write_safetensors("ok.safetensors", header, 96));
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  REQUIRE(r->size() == 2);
  const SafetensorsEntry& w = r->at(0).name == "w" ? r->at(0) : r->at(1);
  CHECK(w.dtype == DType::kBF16);
  CHECK(w.shape == std::vector<int64_t>{4, 8});
  CHECK(w.elements() == 32);
}

TEST_CASE("hostile headers are refused with the file and the field") {
  CHECK(refusal("past_end.safetensors", "{}", 0, 1 << 20).find("past the end") != std::string::npos);
  CHECK(refusal("huge_len.safetensors", "{}", 0, int64_t{1} << 40).find("100 MiB") != std::string::npos);
  CHECK(refusal("overlap.safetensors",
                R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})", 12)
            .find("overlaps") != std::string::npos);
  CHECK(refusal("hole.safetensors", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})", 12).find("hole") !=
        std::string::npos);
  CHECK(refusal("tail.safetensors", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 20).find("not indexed") !=
        std::string::npos);
  CHECK(refusal("range.safetensors", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 4).find("outside") !=
        std::string::npos);
  CHECK(refusal("size.safetensors", R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,8]}})", 8).find("needs 32") !=
        std::string::npos);
  CHECK(refusal("overflow.safetensors",
                R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})", 8)
            .find("overflows") != std::string::npos);
  CHECK(refusal("dtype.safetensors", R"({"a":{"dtype":"Q4","shape":[8],"data_offsets":[0,8]}})", 8).find("unknown \"Q4\"") !=
        std::string::npos);
  CHECK(refusal("negative.safetensors", R"({"a":{"dtype":"U8","shape":[-8],"data_offsets":[0,8]}})", 8).find("shape") !=
        std::string::npos);
  CHECK(refusal("dup.safetensors",
                R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"a":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})", 16)
            .find("dup") != std::string::npos);
  refusal("utf8.safetensors", std::string("{\"\xff\xfe\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"), 1);
  refusal("deep.safetensors", std::string(1000, '[') + std::string(1000, ']'), 0);
  refusal("notjson.safetensors", "{\"a\": ", 0);
  const auto missing = read_safetensors_header(scratch("missing.safetensors"));
  CHECK_FALSE(missing.is_ok());
  refusal("empty_header.safetensors", "", 0, 0);  // zero-length header: not JSON
}

TEST_CASE("a sharded index reads every shard and checks the weight map") {
  write_safetensors("model-00001-of-00002.safetensors", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 8);
  write_safetensors("model-00002-of-00002.safetensors", R"({"b":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}})", 8);
  const std::string index = scratch("model.safetensors.index.json");
  std::ofstream(index) << R"({"metadata":{"total_size":16},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  const auto all = read_safetensors_index(index);
  REQUIRE_MESSAGE(all.is_ok(), all.message());
  CHECK(all->size() == 2);
  const std::string bad = scratch("bad.index.json");
  std::ofstream(bad) << R"({"weight_map":{"c":"model-00001-of-00002.safetensors"}})";
  const auto refused = read_safetensors_index(bad);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("lacks it") != std::string::npos);
  const std::string escape = scratch("escape.index.json");
  std::ofstream(escape) << R"({"weight_map":{"a":"../../etc/passwd"}})";
  CHECK_FALSE(read_safetensors_index(escape).is_ok());
}

}  // namespace headroom::graph
