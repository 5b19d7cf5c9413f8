// Training-state checkpoints on disk that can never destroy the previous good
// one. A checkpoint is a set of named parts (serialized weights, optimizer
// state, run state) written as DIR/step-<8 digits>/ with a MANIFEST (sizes and
// CRC-32C checksums) written last. Saving checks free space first, writes into
// a temporary directory, flushes every file, renames the directory into place,
// and only then removes checkpoints beyond the last `keep`. Loading takes the
// newest checkpoint whose manifest and parts verify, skipping damaged ones.
// File-system access goes through FileSystem so tests inject failures (as
// LevelDB's Env). Torch-free: the trainer serializes tensors into the parts.
// The format and the save protocol: docs/training-checkpoints.md.
//
// One process writes a directory at a time; a StateStore is not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace headroom::executor {

// The operations the store needs. Every error names the path and the reason.
// GiB (2^30) as in the rest of headroom's output; under 0.01 GiB in bytes, so a
// message never reads "0.00 GiB free ... needs 0.01 GiB".
std::string format_bytes(int64_t bytes);

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual Result<int64_t> free_bytes(const std::string& directory) = 0;  // available to this user
  virtual Status make_directory(const std::string& path) = 0;  // parents too; ok if present
  virtual Result<std::vector<std::string>> list_directory(
      const std::string& path) = 0;  // names, sorted
  virtual bool exists(const std::string& path) = 0;
  // Size in bytes of a regular file; an error for a directory or a missing file.
  // Lets a damaged checkpoint be rejected without reading gigabytes.
  virtual Result<int64_t> file_size(const std::string& path) = 0;
  // Creates or truncates `path` and writes `contents` durably (fsync).
  virtual Status write_file(const std::string& path, std::string_view contents) = 0;
  virtual Result<std::string> read_file(const std::string& path) = 0;
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  virtual Status sync_directory(const std::string& path) = 0;
  virtual Status remove_all(const std::string& path) = 0;  // a file or a directory tree
};

// The operating system's file system (POSIX, executor/posix_file_system.cc). A
// directory fsync refused with EINVAL (file systems that cannot sync
// directories) counts as done.
FileSystem& real_file_system();

// The directory holding `path` ("." for a bare name, "/" at the top).
std::string parent_directory(const std::string& path);

struct StateStoreOptions {
  std::string directory;       // where checkpoints live; created when missing
  int keep = 2;                // complete checkpoints kept (>= 1)
  int64_t min_free_bytes = 0;  // free space to leave on the disk after a save
};

struct LoadedState {
  int64_t step = 0;
  std::string path;                          // the checkpoint's directory
  std::map<std::string, std::string> parts;  // name -> contents (the parts asked for)
  std::vector<std::string> names;            // every part its manifest lists, in manifest order
  std::vector<std::string> skipped;          // damaged newer checkpoints, with why
};

// Which checkpoint load_latest takes and which of its parts it reads.
struct LoadRequest {
  // The parts to read and checksum; the others are only checked for their
  // size (a rank of a job reads its own partition, not every rank's). Null:
  // every part.
  std::function<bool(const std::string& part)> wanted;
  // The newest checkpoint at or before this step (the ranks of a job agree on
  // the newest one that verifies for all of them).
  std::optional<int64_t> at_most_step;
};

// One part of a checkpoint as written: what its manifest entry records.
struct WrittenPart {
  std::string name;
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

class StateStore {
 public:
  static constexpr int64_t kMaxStep = 99'999'999;  // step-<8 digits>

  explicit StateStore(StateStoreOptions options, FileSystem& file_system = real_file_system());

  // Disk bytes a save of `parts` takes (parts plus manifest, each file rounded
  // up to 4 KiB blocks, plus one block for the directory), for free-space checks
  // and the planner's disk estimate. Saving needs this much on top of the
  // checkpoints already there: the old ones are removed only afterwards.
  static int64_t bytes_to_write(const std::map<std::string, std::string>& parts);

  // Saves `parts` as the checkpoint of `step` (0..kMaxStep), replacing an
  // existing checkpoint of the same step only once the new one is complete.
  // On any failure (too little free space, a failed write, flush or rename)
  // the checkpoints already on disk are untouched, the temporary directory is
  // removed where possible, and the message says what failed, what was needed
  // and which checkpoint is intact. Part names: [A-Za-z0-9_.-]+, at most 200
  // characters, not "MANIFEST", not starting with '.'; at least one part.
  // Leftovers of an interrupted earlier save are cleaned up first.
  Status save(int64_t step, const std::map<std::string, std::string>& parts);

  // ---- One checkpoint written by several processes (the ranks of a job),
  // each holding a StateStore of the same directory, which they must all see
  // (one machine or a shared file system, as DeepSpeed's save_checkpoint
  // assumes). The caller runs the steps in order, the ranks agreeing between
  // them (a collective), and the leader ends every failure with
  // abandon_shared_save:
  //   leader      begin_shared_save(step, bytes)   checks as save() does, tidies
  //                                                leftovers, makes the temporary directory
  //   every rank  write_shared_part(step, ...)     each of its parts, flushed
  //   leader      commit_shared_save(step, parts)  MANIFEST of every rank's parts
  //                                                last, then rename and rotate as save()
  // `bytes`: bytes_on_disk of every rank's parts together.
  Status begin_shared_save(int64_t step, int64_t bytes);
  Result<WrittenPart> write_shared_part(int64_t step, const std::string& name, std::string_view contents);
  Status commit_shared_save(int64_t step, const std::vector<WrittenPart>& parts);
  // Removes the temporary directory of a shared save that failed with `cause`;
  // the returned error says what failed and which checkpoint is intact.
  Status abandon_shared_save(int64_t step, const Status& cause);
  // Disk bytes one part of `bytes` takes (4 KiB blocks); a shared save needs
  // the sum over every rank's parts plus shared_save_overhead(parts).
  static int64_t bytes_on_disk(int64_t bytes);
  static int64_t shared_save_overhead(const std::vector<std::string>& part_names);

  // What the last save could not tidy up without failing: an old checkpoint
  // or a leftover temporary directory that could not be removed (it stays on
  // disk and the next save tries again). Empty after a clean save.
  const std::vector<std::string>& last_save_warnings() const { return warnings_; }

  // The newest checkpoint that verifies, with the damaged newer ones it passed
  // over in `skipped`; nullopt when the directory holds no checkpoint. Errors,
  // so that `--resume DIR` never silently starts from scratch: a missing
  // directory ("DIR: no such directory") and checkpoints of which none
  // verifies (the message lists each one's damage).
  Result<std::optional<LoadedState>> load_latest(const LoadRequest& request = {}) const;

  // Before a run trains: creates the directory when missing and writes and
  // removes a probe file in it, so that a directory that cannot be written (a
  // read-only mount, no permission) is an error before step 1, not at the
  // first save after the training. The message names the directory and why.
  Status check_writable() const;

  // Free bytes on the disk that holds (or will hold) the directory.
  Result<int64_t> free_bytes() const;

  // Steps of the complete checkpoints on disk (their MANIFEST parses; parts
  // are not read), ascending. A missing directory is an error, as above.
  Result<std::vector<int64_t>> steps() const;

  const StateStoreOptions& options() const { return options_; }

 private:
  void rotate(int64_t saved_step);
  // The checks and tidying every save starts with, up to a temporary
  // directory at `temp_path` with room for `bytes`.
  Status begin(int64_t step, int64_t bytes, const std::string& temp_path);
  // MANIFEST of `parts` into `temp_path`, then rename into place and rotate.
  Status commit(int64_t step, const std::vector<WrittenPart>& parts, const std::string& temp_path);
  Status abandon(int64_t step, const std::string& temp_path, const Status& cause) const;

  StateStoreOptions options_;
  FileSystem* file_system_;
  std::vector<std::string> warnings_;
  std::set<std::string> verified_;  // checkpoint names written or checksum-verified by this store
};

}  // namespace headroom::executor
