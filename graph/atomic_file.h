// Whole-file reads and crash-safe whole-file writes for the JSON formats.
// Messages name the path and the operating system's reason. Codes: an output
// that cannot be written is kIo (whatever it names); an input that is missing,
// unreadable, not a regular file or over its size limit is kInvalidInput (the
// name given is wrong), and a read that fails once open is kIo.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace headroom::graph {

// How an output path is written, by what it names (after symbolic links).
enum class WriteMethod {
  kReplaceAtomically,  // a regular file, or nothing yet: temporary file + rename
  kWriteThrough,       // a character device or FIFO (/dev/null, a named pipe): opened and written in place
  kRefuse,             // a directory, block device or socket: never written
};

// The method for an existing target of type `mode` (st_mode as stat() gives it).
WriteMethod write_method_for(mode_t mode);

// Writes `contents` to the output `path` without ever replacing what is not a
// regular file:
// - a regular file (or a new path) is replaced so that a reader (or a crash)
//   sees either the old file or the complete new one: a temporary file in the
//   same directory, fsync, rename over the target, fsync of the directory. On
//   failure the old file is untouched and the temporary file is removed. A new
//   file gets mode 0644; a replaced file keeps its mode.
// - a symbolic link stays: the file it points to is the target (created when
//   the link dangles), replaced as above.
// - a character device or FIFO is opened and written in place (a FIFO with no
//   reader is an error, not a wait).
// - a directory, block device or socket is refused.
Status write_file_atomic(const std::string& path, std::string_view contents);

// Opens the output `path` for appending (creating a regular file when it is
// missing), for a log written line by line. As write_file_atomic, a FIFO with
// no reader is an error rather than a wait, and a directory, block device or
// socket is refused. Returns the descriptor (the caller closes it).
Result<int> open_for_appending(const std::string& path);

// Writes all of `contents` to `fd`, retrying short writes and EINTR; returns 0
// or the errno of the failed write. For writers with their own protocol (the
// training-state store).
int write_all(int fd, std::string_view contents);

// Opens `path` for reading only if it is a regular file: the open never blocks
// (a FIFO with no writer would block forever), and anything but a regular file
// is an error naming the path and what it is. Returns the descriptor (the
// caller closes it).
Result<int> open_regular_file(const std::string& path);

// The whole contents of a regular file of at most `max_bytes` bytes. Errors for
// a missing file, a directory, a FIFO or device, a file over the limit, or a
// read failure.
Result<std::string> read_file(const std::string& path, int64_t max_bytes = int64_t{1} << 30);

}  // namespace headroom::graph
