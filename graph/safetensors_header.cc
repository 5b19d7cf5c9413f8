#include "graph/safetensors_header.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "graph/atomic_file.h"
#include "graph/graph_json.h"

namespace headroom::graph {
namespace {

// safetensors dtype names (safetensors/src/tensor.rs, Dtype).
std::optional<DType> safetensors_dtype(const std::string& name) {
  static const std::map<std::string, DType> kNames = {
      {"F32", DType::kF32},  {"F16", DType::kF16},  {"BF16", DType::kBF16}, {"F8_E4M3", DType::kF8E4M3},
      {"I64", DType::kInt64}, {"I32", DType::kInt32}, {"I8", DType::kInt8},  {"U8", DType::kUInt8},
      {"BOOL", DType::kBool},
  };
  const auto it = kNames.find(name);
  if (it == kNames.end()) return std::nullopt;
  return it->second;
}

Status fail(const std::string& path, const std::string& field, const std::string& what) {
  return Status::invalid_input(path + ": " + field + ": " + what);
}

}  // namespace

int64_t SafetensorsEntry::elements() const {
  int64_t total = 1;
  for (int64_t dim : shape) total *= dim;
  return total;
}

Result<std::vector<SafetensorsEntry>> read_safetensors_header(const std::string& path) {
  std::error_code error;
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  if (error) return fail(path, "file", "cannot be read (" + error.message() + ")");
  std::ifstream in(path, std::ios::binary);
  std::string prefix(static_cast<size_t>(std::min<int64_t>(file_size, 8)), '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  if (!in) return fail(path, "header length", "could not read the first 8 bytes");
  if (file_size >= 8) {
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(prefix[i]);
    // Read the header only when its length is plausible; the parser says why not otherwise.
    if (length <= static_cast<uint64_t>(kMaxSafetensorsHeaderBytes) && static_cast<int64_t>(length) <= file_size - 8) {
      prefix.resize(8 + length);
      in.read(prefix.data() + 8, static_cast<std::streamsize>(length));
      if (!in) return fail(path, "header", "could not read " + std::to_string(length) + " bytes");
    }
  }
  return parse_safetensors_header(prefix, file_size, path);
}

Result<std::vector<SafetensorsEntry>> parse_safetensors_header(std::string_view prefix, int64_t file_size,
                                                               const std::string& path) {
  if (file_size < 8 || prefix.size() < 8) {
    return fail(path, "header length", "expected at least 8 bytes, the file has " + std::to_string(file_size));
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(prefix[i]);
  if (length > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return fail(path, "header length", std::to_string(length) + " bytes is over the 100 MiB limit");
  }
  if (static_cast<int64_t>(length) > file_size - 8) {
    return fail(path, "header length", std::to_string(length) + " bytes runs past the end of the file (" +
                                           std::to_string(file_size) + " bytes)");
  }
  if (prefix.size() < 8 + length) return fail(path, "header", "truncated");
  const std::string_view text = prefix.substr(8, length);
  Result<nlohmann::json> json = parse_json_text(text, path);  // depth limit, duplicate keys, UTF-8
  if (!json.is_ok()) return json.status();
  if (!json->is_object()) return fail(path, "header", "expected a JSON object");

  const int64_t data_size = file_size - 8 - static_cast<int64_t>(length);
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, value] : json->items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return fail(path, "__metadata__", "expected an object of strings");
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) return fail(path, "__metadata__." + key, "expected a string");
      }
      continue;
    }
    const std::string field = "\"" + name + "\"";
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets")) {
      return fail(path, field, "expected {\"dtype\", \"shape\", \"data_offsets\"}");
    }
    SafetensorsEntry entry;
    entry.name = name;
    entry.file = path;
    if (!value.at("dtype").is_string()) return fail(path, field + ".dtype", "expected a string");
    const auto dtype = safetensors_dtype(value.at("dtype").get<std::string>());
    if (!dtype) {
      return fail(path, field + ".dtype", "unknown \"" + value.at("dtype").get<std::string>() +
                                              "\" (expected F32, F16, BF16, F8_E4M3, I64, I32, I8, U8 or BOOL)");
    }
    entry.dtype = *dtype;
    if (!value.at("shape").is_array()) return fail(path, field + ".shape", "expected an array of sizes");
    int64_t elements = 1;
    for (const auto& dim : value.at("shape")) {
      if (!dim.is_number_unsigned()) return fail(path, field + ".shape", "expected non-negative integers");
      const uint64_t size = dim.get<uint64_t>();
      if (size > static_cast<uint64_t>(INT64_MAX) ||
          __builtin_mul_overflow(elements, static_cast<int64_t>(size), &elements)) {
        return fail(path, field + ".shape", "element count overflows");
      }
      entry.shape.push_back(static_cast<int64_t>(size));
    }
    const auto& offsets = value.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return fail(path, field + ".data_offsets", "expected [begin, end] as non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(data_size)) {
      return fail(path, field + ".data_offsets", "[" + std::to_string(begin) + ", " + std::to_string(end) +
                                                     "] is outside the data buffer of " + std::to_string(data_size) + " bytes");
    }
    entry.begin = static_cast<int64_t>(begin);
    entry.end = static_cast<int64_t>(end);
    int64_t bytes = 0;
    if (__builtin_mul_overflow(elements, static_cast<int64_t>(dtype_bits(entry.dtype)), &bytes)) {
      return fail(path, field + ".shape", "byte count overflows");
    }
    if (bytes / 8 != entry.end - entry.begin) {
      return fail(path, field + ".data_offsets", "spans " + std::to_string(entry.end - entry.begin) + " bytes, but " +
                                                     value.at("dtype").get<std::string>() + " x " +
                                                     std::to_string(elements) + " elements needs " + std::to_string(bytes / 8));
    }
    entries.push_back(std::move(entry));
  }
  // The data buffer must be covered exactly: sorted by offset, no overlap, no hole.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& entry : entries) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  int64_t expected = 0;
  for (const SafetensorsEntry* entry : by_offset) {
    if (entry->begin < expected) return fail(path, "\"" + entry->name + "\".data_offsets", "overlaps the previous tensor");
    if (entry->begin > expected) {
      return fail(path, "\"" + entry->name + "\".data_offsets", "leaves a hole of " +
                                                                    std::to_string(entry->begin - expected) + " bytes before it");
    }
    expected = entry->end;
  }
  if (expected != data_size) {
    return fail(path, "data", std::to_string(data_size - expected) + " bytes after the last tensor are not indexed");
  }
  return entries;
}

Result<std::vector<SafetensorsEntry>> read_safetensors_index(const std::string& index_path) {
  Result<std::string> text = read_file(index_path, 64LL << 20);
  if (!text.is_ok()) return text.status();
  Result<nlohmann::json> json = parse_json_text(text.value(), index_path);
  if (!json.is_ok()) return json.status();
  if (!json->is_object() || !json->contains("weight_map") || !json->at("weight_map").is_object()) {
    return fail(index_path, "weight_map", "expected an object mapping tensor names to shard files");
  }
  const std::filesystem::path directory = std::filesystem::path(index_path).parent_path();
  std::map<std::string, std::set<std::string>> wanted;  // shard -> names
  for (const auto& [name, file] : json->at("weight_map").items()) {
    if (!file.is_string()) return fail(index_path, "weight_map.\"" + name + "\"", "expected a file name");
    const std::string shard = file.get<std::string>();
    if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos) {
      return fail(index_path, "weight_map.\"" + name + "\"", "expected a file in the index's directory, got \"" + shard + "\"");
    }
    wanted[shard].insert(name);
  }
  std::vector<SafetensorsEntry> all;
  std::set<std::string> seen;
  for (const auto& [shard, names] : wanted) {
    Result<std::vector<SafetensorsEntry>> entries = read_safetensors_header((directory / shard).string());
    if (!entries.is_ok()) return entries.status();
    for (SafetensorsEntry& entry : entries.value()) {
      if (!seen.insert(entry.name).second) {
        return fail(index_path, "\"" + entry.name + "\"", "is stored in more than one shard");
      }
      all.push_back(std::move(entry));
    }
    for (const std::string& name : names) {
      if (!seen.count(name)) return fail(index_path, "weight_map.\"" + name + "\"", "names " + shard + ", which lacks it");
    }
  }
  return all;
}

}  // namespace headroom::graph
