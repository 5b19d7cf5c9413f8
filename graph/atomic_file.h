// Whole-file reads and crash-safe whole-file writes for the JSON formats.
// Messages name the path and the operating system's reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace headroom::graph {

// Replaces `path` with `contents` so that a reader (or a crash) sees either the
// old file or the complete new one: writes a temporary file in the same
// directory, fsyncs it, renames it over `path`, then fsyncs the directory. On
// failure the old file is untouched and the temporary file is removed. A new
// file gets mode 0644; a replaced file keeps its mode.
Status write_file_atomic(const std::string& path, std::string_view contents);

// Writes all of `contents` to `fd`, retrying short writes and EINTR; returns 0
// or the errno of the failed write. For writers with their own protocol (the
// training-state store).
int write_all(int fd, std::string_view contents);

// The whole contents of a regular file of at most `max_bytes` bytes. Errors for
// a missing file, a directory, a file over the limit, or a read failure.
Result<std::string> read_file(const std::string& path, int64_t max_bytes = int64_t{1} << 30);

}  // namespace headroom::graph
