#include "executor/state_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "executor/crc32c.h"
#include "graph/graph_json.h"

namespace headroom::executor {
namespace {

using json = nlohmann::json;

constexpr std::string_view kFormatName = "headroom.training_state";
constexpr int kFormatVersion = 1;
constexpr std::string_view kManifestName = "MANIFEST";
constexpr size_t kMaxPartNameLength = 200;  // well below NAME_MAX (255) with room for suffixes
// A manifest line is ~80 bytes a part; 16 MiB allows 200k parts and stops a
// hostile or corrupt MANIFEST from being read into memory whole.
constexpr int64_t kMaxManifestBytes = int64_t{16} << 20;
// statvfs counts whole blocks: a 1-byte file takes 4 KiB on ext4/xfs defaults.
constexpr int64_t kBlockBytes = 4096;

std::string hex32(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08" PRIx32, value);
  return text;
}

// ---- Names and messages.

std::string join(const std::string& directory, const std::string& name) {
  if (!directory.empty() && directory.back() == '/') return directory + name;
  return directory + "/" + name;
}

std::string shown_directory(const std::string& directory) {
  return directory.empty() || directory.back() == '/' ? directory : directory + "/";
}

std::string step_name(int64_t step) {
  char text[32];
  std::snprintf(text, sizeof text, "step-%08" PRId64, step);
  return text;
}

// "step-00000042" -> 42; anything else (other digit counts, signs) -> nullopt.
std::optional<int64_t> parse_step_name(std::string_view name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() != kPrefix.size() + 8 || name.substr(0, kPrefix.size()) != kPrefix)
    return std::nullopt;
  int64_t step = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

bool valid_part_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxPartNameLength || name == kManifestName || name[0] == '.')
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

std::string in_quotes(std::string_view text) {
  // Hostile names may hold control characters or invalid UTF-8: show them escaped.
  return json(std::string(text)).dump(-1, ' ', true, json::error_handler_t::replace);
}


int64_t round_to_blocks(int64_t bytes) {
  return (bytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
}

// ---- The manifest.

struct PartEntry {
  std::string name;
  int64_t bytes = 0;
  uint32_t crc = 0;
};

std::string manifest_text(int64_t step, const std::vector<PartEntry>& entries) {
  json parts = json::array();
  for (const PartEntry& entry : entries) {
    parts.push_back({{"name", entry.name}, {"bytes", entry.bytes}, {"crc32c", hex32(entry.crc)}});
  }
  const json manifest = {{"format", kFormatName},
                         {"version", kFormatVersion},
                         {"step", step},
                         {"parts", std::move(parts)}};
  return manifest.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::optional<int64_t> as_int64(const json& value) {
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

std::optional<uint32_t> parse_hex32(const json& value) {
  if (!value.is_string()) return std::nullopt;
  const std::string& text = value.get_ref<const std::string&>();
  if (text.size() != 8) return std::nullopt;
  uint32_t result = 0;
  for (char c : text) {
    int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    result = (result << 4) | static_cast<uint32_t>(digit);
  }
  return result;
}

// Checks that `object` has exactly `keys`; the error names the field.
Status expect_keys(const json& object, const std::set<std::string>& keys,
                   const std::string& where) {
  for (const auto& item : object.items()) {
    if (keys.count(item.key()) == 0) {
      return Status::invalid_input(where + ": unknown key " + in_quotes(item.key()) +
                                   " (expected only the documented keys)");
    }
  }
  for (const std::string& key : keys) {
    if (!object.contains(key)) return Status::invalid_input(where + ": missing \"" + key + "\"");
  }
  return Status::ok();
}

Result<std::vector<PartEntry>> parse_manifest(std::string_view text, const std::string& origin,
                                              int64_t expected_step) {
  Result<json> parsed = graph::parse_json_text(text, origin);  // depth limit, duplicate keys
  if (!parsed.is_ok()) return parsed.status();
  const json& manifest = parsed.value();
  if (!manifest.is_object()) return Status::invalid_input(origin + ": expected a JSON object");
  if (Status status = expect_keys(manifest, {"format", "version", "step", "parts"}, origin);
      !status.is_ok()) {
    return status;
  }
  if (manifest["format"] != kFormatName) {
    return Status::invalid_input(origin + ": format: expected \"" + std::string(kFormatName) +
                                 "\"");
  }
  if (as_int64(manifest["version"]) != kFormatVersion) {
    return Status::invalid_input(origin + ": version: " + manifest["version"].dump() +
                                 " (this build reads version " + std::to_string(kFormatVersion) +
                                 ")");
  }
  if (as_int64(manifest["step"]) != expected_step) {
    return Status::invalid_input(origin + ": step: " + manifest["step"].dump() + " (expected " +
                                 std::to_string(expected_step) + ", as the directory name says)");
  }
  const json& parts = manifest["parts"];
  if (!parts.is_array() || parts.empty())
    return Status::invalid_input(origin + ": parts: expected a non-empty array");
  std::vector<PartEntry> entries;
  std::set<std::string> seen;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string where = origin + ": parts[" + std::to_string(i) + "]";
    const json& part = parts[i];
    if (!part.is_object()) return Status::invalid_input(where + ": expected an object");
    if (Status status = expect_keys(part, {"name", "bytes", "crc32c"}, where); !status.is_ok())
      return status;
    PartEntry entry;
    if (!part["name"].is_string() || !valid_part_name(part["name"].get_ref<const std::string&>())) {
      return Status::invalid_input(
          where + ".name: " + part["name"].dump(-1, ' ', true, json::error_handler_t::replace) +
          " (expected a file name of [A-Za-z0-9_.-], not MANIFEST, not starting with '.')");
    }
    entry.name = part["name"].get<std::string>();
    if (!seen.insert(entry.name).second)
      return Status::invalid_input(where + ".name: " + in_quotes(entry.name) + " twice");
    const std::optional<int64_t> bytes = as_int64(part["bytes"]);
    if (!bytes || *bytes < 0)
      return Status::invalid_input(where + ".bytes: expected a non-negative integer");
    entry.bytes = *bytes;
    const std::optional<uint32_t> crc = parse_hex32(part["crc32c"]);
    if (!crc) return Status::invalid_input(where + ".crc32c: expected 8 lowercase hex digits");
    entry.crc = *crc;
    entries.push_back(std::move(entry));
  }
  return entries;
}

// ---- What a checkpoint directory holds.
//
//   step-NNNNNNNN            a complete checkpoint (renamed into place whole)
//   .step-NNNNNNNN.tmp-PID   a save in progress, or one a crash interrupted
//   .step-NNNNNNNN.old       a checkpoint being replaced by a new save of its step
//   .step-NNNNNNNN.deleting  a rotated-out checkpoint being removed
// Anything else is not ours and is left alone.

struct Candidate {
  int64_t step = 0;
  std::string name;  // entry in the directory
};

struct Inventory {
  std::vector<Candidate> checkpoints;  // newest first
  std::vector<Candidate> orphans;      // .old whose step-N is missing: a crash between two renames
  std::vector<std::string> leftovers;  // ours, safe to remove
};

Inventory take_inventory(const std::vector<std::string>& names) {
  Inventory inventory;
  std::set<int64_t> complete;
  for (const std::string& name : names) {
    if (std::optional<int64_t> step = parse_step_name(name)) {
      inventory.checkpoints.push_back({*step, name});
      complete.insert(*step);
    }
  }
  for (const std::string& name : names) {
    if (name.size() < 15 || name[0] != '.') continue;
    const std::optional<int64_t> step = parse_step_name(std::string_view(name).substr(1, 13));
    if (!step) continue;
    const std::string_view suffix = std::string_view(name).substr(14);
    if (suffix == ".old" && complete.count(*step) == 0) {
      // The replaced checkpoint is still the one of its step until the new one
      // is renamed into place: load it, and let the next save put it back.
      inventory.orphans.push_back({*step, name});
      inventory.checkpoints.push_back({*step, name});
    } else if (suffix == ".old" || suffix == ".deleting" || suffix.substr(0, 5) == ".tmp-") {
      inventory.leftovers.push_back(name);
    }
  }
  std::sort(inventory.checkpoints.begin(), inventory.checkpoints.end(),
            [](const Candidate& a, const Candidate& b) { return a.step > b.step; });
  return inventory;
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char text[64];
  if (bytes >= static_cast<int64_t>(kGiB / 100)) {
    std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / kGiB);
  } else {
    std::snprintf(text, sizeof text, "%" PRId64 " bytes", bytes);
  }
  return text;
}


// ---- StateStore.

namespace {

// How far read_checkpoint goes: the manifest only (cheap: it parses), every
// part's size and checksum, or that and their contents kept for loading.
enum class Depth { kManifest, kVerify, kLoad };

// Reads and checks one checkpoint; the error says why it does not verify.
Result<LoadedState> read_checkpoint(FileSystem& fs, const std::string& directory,
                                    const Candidate& candidate, Depth depth,
                                    const std::function<bool(const std::string&)>& wanted = nullptr) {
  const std::string path = join(directory, candidate.name);
  const std::string manifest_path = join(path, std::string(kManifestName));
  Result<int64_t> manifest_bytes = fs.file_size(manifest_path);
  if (!manifest_bytes.is_ok()) return manifest_bytes.status();
  if (manifest_bytes.value() > kMaxManifestBytes) {
    return Status::invalid_input(manifest_path + ": " + std::to_string(manifest_bytes.value()) +
                                 " bytes (expected at most " + std::to_string(kMaxManifestBytes) +
                                 ")");
  }
  Result<std::string> text = fs.read_file(manifest_path);
  if (!text.is_ok()) return text.status();
  Result<std::vector<PartEntry>> entries =
      parse_manifest(text.value(), manifest_path, candidate.step);
  if (!entries.is_ok()) return entries.status();
  LoadedState state;
  state.step = candidate.step;
  state.path = path;
  for (const PartEntry& entry : entries.value()) state.names.push_back(entry.name);
  if (depth == Depth::kManifest) return state;
  for (const PartEntry& entry : entries.value()) {
    const std::string part_path = join(path, entry.name);
    auto mismatch = [&](int64_t on_disk) {
      return Status::invalid_input(part_path + ": " + std::to_string(on_disk) +
                                   " bytes, the manifest says " + std::to_string(entry.bytes) +
                                   " (truncated or overwritten)");
    };
    // The size first: a wrong one is rejected without reading the part.
    Result<int64_t> bytes = fs.file_size(part_path);
    if (!bytes.is_ok()) return bytes.status();
    if (bytes.value() != entry.bytes) return mismatch(bytes.value());
    if (wanted && !wanted(entry.name)) continue;  // another reader's part: its size is checked
    Result<std::string> contents = fs.read_file(part_path);
    if (!contents.is_ok()) return contents.status();
    if (static_cast<int64_t>(contents.value().size()) != entry.bytes) {
      return mismatch(static_cast<int64_t>(contents.value().size()));
    }
    const uint32_t crc = crc32c(contents.value());
    if (crc != entry.crc) {
      return Status::invalid_input(part_path + ": checksum mismatch: crc32c " + hex32(crc) +
                                   ", the manifest says " + hex32(entry.crc) +
                                   " (the data is damaged)");
    }
    if (depth == Depth::kLoad) state.parts.emplace(entry.name, std::move(contents.value()));
  }
  return state;
}

}  // namespace

StateStore::StateStore(StateStoreOptions options, FileSystem& file_system)
    : options_(std::move(options)), file_system_(&file_system) {}

int64_t StateStore::bytes_to_write(const std::map<std::string, std::string>& parts) {
  std::vector<PartEntry> entries;
  int64_t total = kBlockBytes;  // the checkpoint directory itself
  for (const auto& [name, contents] : parts) {
    // The checksum is written as 8 hex digits whatever its value, so a
    // placeholder gives the manifest's exact size without hashing gigabytes.
    entries.push_back({name, static_cast<int64_t>(contents.size()), 0});
    total += round_to_blocks(static_cast<int64_t>(contents.size()));
  }
  return total + round_to_blocks(static_cast<int64_t>(manifest_text(kMaxStep, entries).size()));
}

namespace {

// "step-00000040 is intact": the newest checkpoint whose manifest parses.
std::string intact_note(FileSystem& fs, const std::string& directory) {
  if (!fs.exists(directory)) return "no checkpoint existed before";
  Result<std::vector<std::string>> names = fs.list_directory(directory);
  if (!names.is_ok()) return "the checkpoints already there were not touched";
  for (const Candidate& candidate : take_inventory(names.value()).checkpoints) {
    if (read_checkpoint(fs, directory, candidate, Depth::kManifest).is_ok())
      return candidate.name + " is intact";
  }
  return "no earlier checkpoint existed";
}

// What an existing checkpoint directory holds; a missing one is an error.
Result<Inventory> inventory_of(FileSystem& fs, const std::string& directory) {
  if (!fs.exists(directory)) {
    return Status::invalid_input(
        directory + ": no such directory (expected a directory of training-state checkpoints)");
  }
  Result<std::vector<std::string>> names = fs.list_directory(directory);
  if (!names.is_ok()) return names.status();
  return take_inventory(names.value());
}

std::string nearest_existing(FileSystem& fs, std::string path) {
  while (!fs.exists(path) && path != "." && path != "/") path = parent_directory(path);
  return path;
}

}  // namespace

namespace {

// "DIR/: saving step N: WHY; nothing was written; step-M is intact", with the code of `why`.
Status refusal(FileSystem& fs, const std::string& directory, int64_t step, const Status& why) {
  return why
      .with_prefix(shown_directory(directory) + ": saving step " + std::to_string(step) + ": ")
      .with_suffix("; nothing was written; " + intact_note(fs, directory));
}

// Where a save writes before its rename into place: the process's own name,
// or one every rank of a job can compute.
std::string temp_path_of(const std::string& directory, int64_t step, const std::string& tag) {
  return join(directory, "." + step_name(step) + ".tmp-" + tag);
}

std::string shared_temp_path(const std::string& directory, int64_t step) {
  return temp_path_of(directory, step, "ranks");
}

}  // namespace

Status StateStore::save(int64_t step, const std::map<std::string, std::string>& parts) {
  warnings_.clear();
  FileSystem& fs = *file_system_;
  if (parts.empty()) {
    return refusal(fs, options_.directory, step,
                   Status::internal("no parts given (expected at least one)"));
  }
  for (const auto& [name, contents] : parts) {
    if (!valid_part_name(name)) {
      return refusal(
          fs, options_.directory, step,
          Status::internal(
              "part name " + in_quotes(name) +
              " is not allowed (expected [A-Za-z0-9_.-]+, not MANIFEST, not starting with '.')"));
    }
  }
  const std::string temp_path = temp_path_of(options_.directory, step, std::to_string(::getpid()));
  if (Status status = begin(step, bytes_to_write(parts), temp_path); !status.is_ok()) return status;
  std::vector<WrittenPart> written;
  for (const auto& [name, contents] : parts) {
    if (Status status = fs.write_file(join(temp_path, name), contents); !status.is_ok())
      return abandon(step, temp_path, status);
    written.push_back({name, static_cast<int64_t>(contents.size()), crc32c(contents)});
  }
  return commit(step, written, temp_path);
}

Status StateStore::begin(int64_t step, int64_t bytes, const std::string& temp_path) {
  FileSystem& fs = *file_system_;
  const std::string& directory = options_.directory;
  const std::string shown = shown_directory(directory);
  const std::string what = "saving step " + std::to_string(step);
  auto refuse = [&](const Status& why) { return refusal(fs, directory, step, why); };
  if (directory.empty())
    return Status::invalid_input("(no directory): " + what + ": expected a checkpoint directory");
  if (options_.keep < 1)
    return refuse(Status::invalid_input("keep is " + std::to_string(options_.keep) +
                                        " (expected at least 1)"));
  if (options_.min_free_bytes < 0)
    return refuse(Status::invalid_input("min_free_bytes is negative"));
  if (step < 0 || step > kMaxStep)
    return refuse(Status::invalid_input("expected a step from 0 to " + std::to_string(kMaxStep)));

  // Leftovers of an interrupted save go first: they are garbage and their
  // space counts towards this save.
  if (fs.exists(directory)) {
    Result<std::vector<std::string>> names = fs.list_directory(directory);
    if (!names.is_ok()) return refuse(names.status());
    const Inventory inventory = take_inventory(names.value());
    for (const Candidate& orphan : inventory.orphans) {
      Status status =
          fs.rename(join(directory, orphan.name), join(directory, step_name(orphan.step)));
      if (!status.is_ok()) warnings_.push_back(status.message());
    }
    for (const std::string& leftover : inventory.leftovers) {
      Status status = fs.remove_all(join(directory, leftover));
      if (!status.is_ok())
        warnings_.push_back(status.message() + " (a leftover; the next save tries again)");
    }
  }

  Result<int64_t> free = free_bytes();
  if (!free.is_ok()) return refuse(free.status());
  const int64_t keep_free = options_.min_free_bytes;
  if (free.value() < bytes || free.value() - bytes < keep_free) {
    std::string message =
        format_bytes(free.value()) + " free, " + what + " needs " + format_bytes(bytes);
    if (keep_free > 0) message += " (+" + format_bytes(keep_free) + " kept free)";
    return Status::io(shown + ": " + message + "; nothing was written; " +
                      intact_note(fs, directory));
  }
  if (Status status = fs.make_directory(directory); !status.is_ok()) return refuse(status);
  // Everything after this point has written something: a failure removes the
  // temporary directory and says whether that worked.
  if (Status status = fs.make_directory(temp_path); !status.is_ok()) return abandon(step, temp_path, status);
  return Status::ok();
}

Status StateStore::abandon(int64_t step, const std::string& temp_path, const Status& cause) const {
  FileSystem& fs = *file_system_;
  const std::string& directory = options_.directory;
  std::string message = shown_directory(directory) + ": saving step " + std::to_string(step) +
                        " failed: " + cause.message();
  if (Status removed = fs.remove_all(temp_path); removed.is_ok()) {
    message += "; the partial checkpoint was removed";
  } else {
    message += "; the partial checkpoint could not be removed (" + removed.message() +
               ") and the next save removes it";
  }
  return Status::with_code(cause.code(), message + "; " + intact_note(fs, directory));
}

Status StateStore::commit(int64_t step, const std::vector<WrittenPart>& parts, const std::string& temp_path) {
  FileSystem& fs = *file_system_;
  const std::string& directory = options_.directory;
  const std::string shown = shown_directory(directory);
  const std::string what = "saving step " + std::to_string(step);
  const std::string final_path = join(directory, step_name(step));
  const std::string old_path = join(directory, "." + step_name(step) + ".old");
  auto abandon_with = [&](const Status& cause) { return abandon(step, temp_path, cause); };

  std::vector<PartEntry> entries;
  for (const WrittenPart& part : parts) entries.push_back({part.name, part.bytes, part.crc32c});
  // MANIFEST last: a directory with a valid MANIFEST has all its parts.
  const std::string manifest = manifest_text(step, entries);
  if (Status status = fs.write_file(join(temp_path, std::string(kManifestName)), manifest);
      !status.is_ok()) {
    return abandon_with(status);
  }
  if (Status status = fs.sync_directory(temp_path); !status.is_ok()) return abandon_with(status);

  // rename() cannot replace a non-empty directory, so an existing checkpoint
  // of this step steps aside first; until the new one is in place the loader
  // still finds it under .old (see take_inventory).
  const bool replacing = fs.exists(final_path);
  if (replacing) {
    if (Status status = fs.rename(final_path, old_path); !status.is_ok()) return abandon_with(status);
  }
  if (Status status = fs.rename(temp_path, final_path); !status.is_ok()) {
    if (replacing) {
      if (Status back = fs.rename(old_path, final_path); !back.is_ok()) {
        const Status failed = abandon_with(status);
        return failed.with_suffix("; the earlier " + step_name(step) + " is intact as " + old_path +
                                  " (it loads from there; the next save moves it back)");
      }
    }
    return abandon_with(status);
  }
  if (Status status = fs.sync_directory(directory); !status.is_ok()) {
    // The new checkpoint is in place but its name may not survive a power
    // loss: report it, and rotate nothing so that older ones remain.
    return status.with_prefix(shown + ": " + what + ": " + step_name(step) + " is in place but ")
        .with_suffix(", so it may not survive a power loss; no checkpoint was removed");
  }
  verified_.insert(step_name(step));  // written and flushed by this store just now
  if (replacing) {
    if (Status status = fs.remove_all(old_path); !status.is_ok()) {
      warnings_.push_back(status.message() +
                          " (the replaced checkpoint; the next save tries again)");
    }
  }
  rotate(step);
  return Status::ok();
}

// ---- A save of several ranks.

int64_t StateStore::bytes_on_disk(int64_t bytes) { return round_to_blocks(bytes); }

int64_t StateStore::shared_save_overhead(const std::vector<std::string>& part_names) {
  std::vector<PartEntry> entries;
  // The largest byte count a manifest can hold, so its size is an upper bound.
  for (const std::string& name : part_names) entries.push_back({name, std::numeric_limits<int64_t>::max(), 0});
  return kBlockBytes + round_to_blocks(static_cast<int64_t>(manifest_text(kMaxStep, entries).size()));
}

Status StateStore::begin_shared_save(int64_t step, int64_t bytes) {
  warnings_.clear();
  return begin(step, bytes, shared_temp_path(options_.directory, step));
}

Result<WrittenPart> StateStore::write_shared_part(int64_t step, const std::string& name,
                                                  std::string_view contents) {
  if (!valid_part_name(name)) {
    return Status::internal(shown_directory(options_.directory) + ": saving step " +
                            std::to_string(step) + ": part name " + in_quotes(name) +
                            " is not allowed");
  }
  const std::string temp_path = shared_temp_path(options_.directory, step);
  if (Status status = file_system_->write_file(join(temp_path, name), contents); !status.is_ok()) {
    return status.with_prefix(shown_directory(options_.directory) + ": saving step " +
                              std::to_string(step) + ": ");
  }
  return WrittenPart{name, static_cast<int64_t>(contents.size()), crc32c(contents)};
}

Status StateStore::commit_shared_save(int64_t step, const std::vector<WrittenPart>& parts) {
  const std::string temp_path = shared_temp_path(options_.directory, step);
  std::set<std::string> seen;
  for (const WrittenPart& part : parts) {
    if (!valid_part_name(part.name) || !seen.insert(part.name).second) {
      return abandon(
          step, temp_path,
          Status::internal("part " + in_quotes(part.name) + " is not allowed or given twice"));
    }
  }
  if (parts.empty()) return abandon(step, temp_path, Status::internal("no parts were written"));
  return commit(step, parts, temp_path);
}

Status StateStore::abandon_shared_save(int64_t step, const Status& cause) {
  return abandon(step, shared_temp_path(options_.directory, step), cause);
}

// Removes complete checkpoints beyond the newest `keep` that verify (the one
// just saved counts and is never removed). A checkpoint counts as kept only
// when its parts match their checksums: a damaged one must not push out an
// older good one (issue 14: a damaged step-6 kept, the good step-5 deleted).
// Checkpoints this store wrote, or verified before, are not read again. Each
// removed one goes out of sight by a rename first, so a removal that fails
// halfway never leaves a damaged step-N behind. Failures are warnings: the
// data they concern is still there.
void StateStore::rotate(int64_t saved_step) {
  FileSystem& fs = *file_system_;
  const std::string& directory = options_.directory;
  Result<std::vector<std::string>> names = fs.list_directory(directory);
  if (!names.is_ok()) {
    warnings_.push_back(names.message() + " (old checkpoints were not rotated)");
    return;
  }
  int complete = 0;
  for (const Candidate& candidate : take_inventory(names.value()).checkpoints) {
    if (candidate.step == saved_step) {
      ++complete;
      continue;
    }
    if (complete < options_.keep) {
      if (verified_.count(candidate.name) != 0 ||
          read_checkpoint(fs, directory, candidate, Depth::kVerify).is_ok()) {
        verified_.insert(candidate.name);
        ++complete;
      }
      continue;
    }
    const std::string doomed = join(directory, "." + step_name(candidate.step) + ".deleting");
    if (Status status = fs.rename(join(directory, candidate.name), doomed); !status.is_ok()) {
      warnings_.push_back(status.message() + " (kept; the next save tries again)");
      continue;
    }
    if (Status status = fs.remove_all(doomed); !status.is_ok()) {
      warnings_.push_back(status.message() + " (out of sight; the next save tries again)");
    }
  }
}

Status StateStore::check_writable() const {
  FileSystem& fs = *file_system_;
  const std::string& directory = options_.directory;
  auto refuse = [&](const Status& cause) {
    return cause.with_prefix(shown_directory(directory) + ": checkpoints cannot be written there: ")
        .with_suffix(" (expected a writable directory; nothing was trained)");
  };
  if (directory.empty())
    return Status::invalid_input("(no directory): expected a checkpoint directory");
  if (Status status = fs.make_directory(directory); !status.is_ok()) return refuse(status);
  // A name take_inventory() ignores (too short for one of ours), so a probe a
  // crash leaves behind is never mistaken for a checkpoint.
  const std::string probe = join(directory, ".probe-" + std::to_string(::getpid()));
  if (Status status = fs.write_file(probe, "headroom checks that checkpoints can be written here\n");
      !status.is_ok()) {
    (void)fs.remove_all(probe);
    return refuse(status);
  }
  if (Status status = fs.remove_all(probe); !status.is_ok()) return refuse(status);
  return Status::ok();
}

Result<int64_t> StateStore::free_bytes() const {
  return file_system_->free_bytes(nearest_existing(*file_system_, options_.directory));
}

Result<std::optional<LoadedState>> StateStore::load_latest(const LoadRequest& request) const {
  FileSystem& fs = *file_system_;
  const std::string& directory = options_.directory;
  Result<Inventory> inventory = inventory_of(fs, directory);
  if (!inventory.is_ok()) return inventory.status();
  std::vector<std::string> skipped;
  for (const Candidate& candidate : inventory->checkpoints) {
    if (request.at_most_step && candidate.step > *request.at_most_step) continue;
    Result<LoadedState> state = read_checkpoint(fs, directory, candidate, Depth::kLoad, request.wanted);
    if (state.is_ok()) {
      state->skipped = std::move(skipped);
      return std::optional<LoadedState>(std::move(state.value()));
    }
    skipped.push_back(state.message());
  }
  if (skipped.empty()) return std::optional<LoadedState>();
  // Checkpoints exist but none verifies: starting from scratch silently would
  // throw away a run the user means to resume.
  std::string message = shown_directory(directory) + ": no checkpoint verifies:";
  for (const std::string& why : skipped) message += "\n  " + why;
  return Status::invalid_input(message);
}

Result<std::vector<int64_t>> StateStore::steps() const {
  FileSystem& fs = *file_system_;
  const std::string& directory = options_.directory;
  Result<Inventory> inventory = inventory_of(fs, directory);
  if (!inventory.is_ok()) return inventory.status();
  std::vector<int64_t> result;
  for (const Candidate& candidate : inventory->checkpoints) {
    if (read_checkpoint(fs, directory, candidate, Depth::kManifest).is_ok()) result.push_back(candidate.step);
  }
  std::sort(result.begin(), result.end());
  return result;
}

}  // namespace headroom::executor
