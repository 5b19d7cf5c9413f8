// What reading a user's own config file gives (planner/configs/torchtune_import.h,
// planner/configs/hf_trainer_import.h): the settings, the keys it ignored, and what it
// had to assume. docs/config-import.md.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// A file a config names and its reader opened (a DeepSpeed config named by the
// Trainer's `deepspeed` argument), under the key that named it: an input of the
// command like the config itself, which no output may replace (issue 37).
struct FileRead {
  std::string key;   // "deepspeed", "deepspeed_config.deepspeed_config_file"
  std::string path;  // as the config gives it (opened relative to the working directory)
};

struct ConfigImport {
  RunSettings settings;
  std::vector<FileRead> files_read;  // files the config names that were read too
  std::vector<std::string> ignored;  // keys read as having no effect on memory or time
  std::vector<std::string> notes;    // what was assumed where the file leaves a choice open
  // The file does not fix the sequence length (padded batches of unknown
  // length, or no length key at all): --seq must say.
  bool sequence_unknown = false;
  // Facts that depend on the GPU count, which the flags give after the file:
  // shard with ZeRO-3 (FSDP2) when the run has more than one GPU and the flags
  // name no stage (torchtune's distributed recipes), and shard within a node
  // only (FSDP hybrid_shard).
  bool shard_when_distributed = false;
  bool shard_within_node = false;
};

// The largest config file an importer reads; real ones are a few kB.
inline constexpr int64_t kMaxConfigFileBytes = int64_t{4} << 20;

// `value` as compact JSON text for a message, cut to about `max_chars` ("..." marks
// the cut) and nested no deeper than graph::kMaxJsonDepth: its cost is bounded by
// max_chars, never by the value's size or depth. Invalid UTF-8 is replaced.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars);

// "ORIGIN: PATH: expected EXPECTED, got VALUE" (the value cut to 80 characters,
// invalid UTF-8 replaced; no ", got" for a null value): every importer's field error.
Status config_field_error(std::string_view origin, const std::string& path, const std::string& expected,
                          const nlohmann::json& got = nullptr);

// A note that starts "FROM:" starts "TO:" instead: a key named as the file spells it
// when another reader read it under the Trainer's name.
void respell_notes(ConfigImport& imported, std::string_view from, std::string_view to);

// The words every importer ends its note on unpacked batches with, after saying
// the cap: "(the band's bottom), and over batches of lengths drawn from SHORTEST to
// it, ... (its top; --shortest-sample N narrows it)" (RunSettings::shortest_sample).
std::string padded_batches_band(std::string_view shortest);

}  // namespace headroom::planner
