// Training-state checkpoints under injected disk faults (as LevelDB's
// fault_injection_test.cc): every failure must leave the previous checkpoint
// loadable with identical parts, clean up after itself, say what happened, and
// let the next save succeed. Format: docs/training-checkpoints.md.
#include "executor/state_store.h"
#include "tests/support/temp_dir.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace headroom::executor {
namespace {

using headroom::testing::TempDir;

namespace fs = std::filesystem;
using Parts = std::map<std::string, std::string>;

// A fresh mkdtemp directory per test case, removed afterwards.
std::vector<std::string> entries(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void put(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

// Distinct, binary contents per step (NUL bytes, a 100 KiB part crossing the
// checksum's 8-byte blocks, an empty part).
Parts parts_for(int64_t step) {
  std::string weights(100 * 1024 + 3, '\0');
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i] = static_cast<char>((i * 31 + step * 7) & 0xFF);
  return {{"model.weights", weights},
          {"optimizer", std::string("adam\0state-", 11) + std::to_string(step)},
          {"run_state", "{\"step\": " + std::to_string(step) + "}"},
          {"empty", ""}};
}

std::optional<LoadedState> load(const std::string& directory) {
  StateStore store({directory});
  Result<std::optional<LoadedState>> loaded = store.load_latest();
  REQUIRE_MESSAGE(loaded.is_ok(), loaded.message());
  return loaded.value();
}

// The newest checkpoint is `step` with exactly its original parts.
void check_latest(const std::string& directory, int64_t step, const Parts& parts) {
  std::optional<LoadedState> state = load(directory);
  REQUIRE(state.has_value());
  CHECK(state->step == step);
  CHECK(state->parts == parts);
  CHECK(state->skipped.empty());
}

// Wraps the real file system and fails on purpose. Counters are 1-based: the
// Nth call of that kind fails.
class FaultInjectingFileSystem final : public FileSystem {
 public:
  int fail_write = 0;  // the Nth write_file writes half of its bytes, then fails
  int write_errno = ENOSPC;
  int fail_fsync = 0;               // the Nth write_file writes everything, then its flush fails
  int fail_rename = 0;              // the Nth rename fails (EIO), nothing moved
  std::string fail_sync_directory;  // sync_directory of this path fails
  bool fail_remove = false;         // every remove_all fails
  std::optional<int64_t> reported_free_bytes;
  // A process death after this many mutating calls: the next one (a write
  // tears halfway) and all later ones fail, so no cleanup happens either.
  int crash_after = -1;

  int writes = 0, renames = 0, mutations = 0;

  Result<int64_t> free_bytes(const std::string& directory) override {
    if (reported_free_bytes) return *reported_free_bytes;
    return base_->free_bytes(directory);
  }
  Status make_directory(const std::string& path) override {
    if (crashed()) return dead(path);
    return base_->make_directory(path);
  }
  Result<std::vector<std::string>> list_directory(const std::string& path) override {
    return base_->list_directory(path);
  }
  bool exists(const std::string& path) override { return base_->exists(path); }
  Result<int64_t> file_size(const std::string& path) override { return base_->file_size(path); }
  Status write_file(const std::string& path, std::string_view contents) override {
    ++writes;
    if (crashed()) {
      (void)base_->write_file(path, contents.substr(0, contents.size() / 2));
      return dead(path);
    }
    if (writes == fail_write) {
      (void)base_->write_file(path, contents.substr(0, contents.size() / 2));  // a torn write
      return Status::io(path + ": cannot write: " + std::strerror(write_errno));
    }
    Status status = base_->write_file(path, contents);
    if (status.is_ok() && writes == fail_fsync) {
      return Status::io(path + ": cannot flush to disk (fsync): " + std::strerror(EIO));
    }
    return status;
  }
  Result<std::string> read_file(const std::string& path) override { return base_->read_file(path); }
  Status rename(const std::string& from, const std::string& to) override {
    ++renames;
    if (crashed()) return dead(from);
    if (renames == fail_rename)
      return Status::io(from + ": cannot rename to " + to + ": " + std::strerror(EIO));
    return base_->rename(from, to);
  }
  Status sync_directory(const std::string& path) override {
    if (crashed()) return dead(path);
    if (path == fail_sync_directory) {
      return Status::io(path + ": cannot flush directory to disk (fsync): " + std::strerror(EIO));
    }
    return base_->sync_directory(path);
  }
  Status remove_all(const std::string& path) override {
    if (crashed()) return dead(path);
    if (fail_remove) return Status::io(path + ": cannot remove: " + std::strerror(EACCES));
    return base_->remove_all(path);
  }

 private:
  bool crashed() { return crash_after >= 0 && ++mutations > crash_after; }
  static Status dead(const std::string& path) { return Status::io(path + ": simulated crash"); }
  FileSystem* base_ = &real_file_system();
};

TEST_CASE(
    "save writes step-NNNNNNNN/ with one file per part and a MANIFEST, and load_latest reads it "
    "back") {
  TempDir dir;
  const std::string root = dir.file("checkpoints");  // created on the first save
  StateStore store({root});
  const Parts parts = parts_for(42);
  REQUIRE(store.save(42, parts).is_ok());
  CHECK(store.last_save_warnings().empty());
  CHECK(entries(root) == std::vector<std::string>{"step-00000042"});
  CHECK(entries(root + "/step-00000042") ==
        std::vector<std::string>{"MANIFEST", "empty", "model.weights", "optimizer", "run_state"});
  for (const auto& [name, contents] : parts)
    CHECK(slurp(root + "/step-00000042/" + name) == contents);

  const nlohmann::json manifest = nlohmann::json::parse(slurp(root + "/step-00000042/MANIFEST"));
  CHECK(manifest["format"] == "headroom.training_state");
  CHECK(manifest["version"] == 1);
  CHECK(manifest["step"] == 42);
  REQUIRE(manifest["parts"].size() == 4);
  CHECK(manifest["parts"][0] ==
        nlohmann::json{{"name", "empty"}, {"bytes", 0}, {"crc32c", "00000000"}});
  CHECK(manifest["parts"][1]["bytes"] == parts.at("model.weights").size());

  check_latest(root, 42, parts);
  Result<std::vector<int64_t>> steps = store.steps();
  REQUIRE(steps.is_ok());
  CHECK(steps.value() == std::vector<int64_t>{42});
}

TEST_CASE(
    "the MANIFEST checksum is CRC-32C (known answers from RFC 3720 B.4 and the usual check "
    "value)") {
  TempDir dir;
  StateStore store({dir.str()});
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[static_cast<size_t>(i)] = static_cast<char>(i);
  REQUIRE(store
              .save(1, {{"check", "123456789"},
                        {"zeros", std::string(32, '\0')},
                        {"ones", std::string(32, '\xFF')},
                        {"ascending", ascending}})
              .is_ok());
  std::map<std::string, std::string> crc;
  const nlohmann::json manifest = nlohmann::json::parse(slurp(dir.file("step-00000001/MANIFEST")));
  for (const auto& part : manifest["parts"]) {
    crc[part["name"].get<std::string>()] = part["crc32c"].get<std::string>();
  }
  CHECK(crc["check"] == "e3069283");
  CHECK(crc["zeros"] == "8a9136aa");
  CHECK(crc["ones"] == "62a8ab43");
  CHECK(crc["ascending"] == "46dd794e");
}

TEST_CASE("bytes_to_write counts 4 KiB blocks for every file and the directory") {
  CHECK(StateStore::bytes_to_write({{"a", "x"}}) == 3 * 4096);  // directory, part, manifest
  CHECK(StateStore::bytes_to_write({{"a", std::string(5000, 'x')}}) == 4096 + 8192 + 4096);
  CHECK(StateStore::bytes_to_write({{"a", ""}, {"b", std::string(4096, 'x')}}) == 3 * 4096);
}

TEST_CASE("an empty directory holds no checkpoint, a missing one is an error") {
  TempDir dir;
  CHECK_FALSE(load(dir.str()).has_value());
  StateStore missing({dir.file("nope")});
  Result<std::optional<LoadedState>> loaded = missing.load_latest();
  REQUIRE_FALSE(loaded.is_ok());
  CHECK(loaded.message() ==
        dir.file("nope") +
            ": no such directory (expected a directory of training-state checkpoints)");
  CHECK_FALSE(missing.steps().is_ok());
}

TEST_CASE("rotation keeps exactly `keep` checkpoints, the newest") {
  for (int keep : {1, 2, 3}) {
    CAPTURE(keep);
    TempDir dir;
    StateStore store({dir.str(), keep});
    for (int64_t step = 10; step <= 60; step += 10)
      REQUIRE(store.save(step, parts_for(step)).is_ok());
    std::vector<int64_t> expected;
    for (int64_t step = 60 - 10 * (keep - 1); step <= 60; step += 10) expected.push_back(step);
    CHECK(store.steps().value() == expected);
    CHECK(entries(dir.str()).size() == static_cast<size_t>(keep));
    check_latest(dir.str(), 60, parts_for(60));
  }
}

TEST_CASE("rotation never counts a checkpoint that fails its checksum as kept (issue 14)") {
  // Resume fell back past a damaged step-6 to step-5; the next save (step 8)
  // must keep step-5, the newest good one, not the damaged step-6.
  TempDir dir;
  {
    StateStore writer({dir.str(), 2});
    REQUIRE(writer.save(5, parts_for(5)).is_ok());
    REQUIRE(writer.save(6, parts_for(6)).is_ok());
  }
  std::string data = slurp(dir.file("step-00000006/model.weights"));
  data[100] = static_cast<char>(data[100] ^ 0x40);
  put(dir.file("step-00000006/model.weights"), data);

  StateStore resumed({dir.str(), 2});
  REQUIRE(resumed.save(8, parts_for(8)).is_ok());
  CHECK(fs::exists(dir.file("step-00000005")));
  CHECK(fs::exists(dir.file("step-00000008")));
  // Step 8 missing now: the good step-5 is what a resume falls back to.
  fs::remove_all(dir.file("step-00000008"));
  std::optional<LoadedState> state = load(dir.str());
  REQUIRE(state.has_value());
  CHECK(state->step == 5);
  CHECK(state->parts == parts_for(5));
}

TEST_CASE("check_writable finds a directory that cannot be written before any training") {
  TempDir dir;
  SUBCASE("a writable directory is created and left empty") {
    StateStore store({dir.file("new/checkpoints")});
    REQUIRE(store.check_writable().is_ok());
    CHECK(fs::is_directory(dir.file("new/checkpoints")));
    CHECK(entries(dir.file("new/checkpoints")).empty());
  }
  SUBCASE("writes that fail (a read-only mount) are an error naming the directory") {
    FaultInjectingFileSystem faulty;
    faulty.fail_write = 1;
    faulty.write_errno = EROFS;
    StateStore store({dir.file("ro"), 2}, faulty);
    const Status status = store.check_writable();
    REQUIRE_FALSE(status.is_ok());
    CAPTURE(status.message());
    CHECK(status.message().find(dir.file("ro") + "/: checkpoints cannot be written there: ") == 0);
    CHECK(status.message().find("Read-only file system") != std::string::npos);
    CHECK(status.message().find("nothing was trained") != std::string::npos);
    CHECK(entries(dir.file("ro")).empty());
  }
  SUBCASE("a path under a regular file") {
    put(dir.file("plain"), "x");
    StateStore store({dir.file("plain/checkpoints")});
    CHECK_FALSE(store.check_writable().is_ok());
  }
}

TEST_CASE("saving an older step than those on disk never rotates the new one away") {
  TempDir dir;
  StateStore store({dir.str(), 1});
  REQUIRE(store.save(50, parts_for(50)).is_ok());
  REQUIRE(store.save(7, parts_for(7)).is_ok());
  CHECK(store.steps().value() == std::vector<int64_t>{7, 50});
}

TEST_CASE("saving a step that exists replaces it and leaves nothing behind") {
  TempDir dir;
  StateStore store({dir.str(), 1});
  REQUIRE(store.save(40, parts_for(40)).is_ok());
  const Parts newer = {{"model.weights", "replaced"}};
  REQUIRE(store.save(40, newer).is_ok());
  CHECK(entries(dir.str()) == std::vector<std::string>{"step-00000040"});
  CHECK(entries(dir.file("step-00000040")) == std::vector<std::string>{"MANIFEST", "model.weights"});
  check_latest(dir.str(), 40, newer);
}

// Every fault below runs against this starting point: step 40 saved, step 42
// failing, then step 42 saved again without faults.
struct FaultCase {
  TempDir dir;
  FaultInjectingFileSystem faults;
  StateStore store{{dir.str(), 1}, faults};
  FaultCase() {
    REQUIRE(store.save(40, parts_for(40)).is_ok());
    faults.writes = faults.renames = 0;
  }

  // The failed save of 42 left 40 as it was and no temporary directory.
  void check_intact(const Status& status) {
    REQUIRE_FALSE(status.is_ok());
    CHECK(status.message().find(dir.str() + "/: ") == 0);
    CHECK(status.message().find("saving step 42") != std::string::npos);
    CHECK(status.message().find("step-00000040 is intact") != std::string::npos);
    CHECK(entries(dir.str()) == std::vector<std::string>{"step-00000040"});
    check_latest(dir.str(), 40, parts_for(40));
  }
  void check_next_save_succeeds() {
    faults = FaultInjectingFileSystem();
    REQUIRE(store.save(42, parts_for(42)).is_ok());
    CHECK(entries(dir.str()) == std::vector<std::string>{"step-00000042"});
    check_latest(dir.str(), 42, parts_for(42));
  }
};

TEST_CASE("a write that fails halfway (ENOSPC, EIO) loses nothing, whichever file it hits") {
  // parts_for() has 4 parts, then the MANIFEST: writes 1..5 of the save.
  for (int error : {ENOSPC, EIO}) {
    for (int nth = 1; nth <= 5; ++nth) {
      CAPTURE(error);
      CAPTURE(nth);
      FaultCase c;
      c.faults.fail_write = nth;
      c.faults.write_errno = error;
      const Status status = c.store.save(42, parts_for(42));
      c.check_intact(status);
      CHECK(status.message().find(std::strerror(error)) != std::string::npos);
      CHECK(status.message().find("/.step-00000042.tmp-") != std::string::npos);  // names the file
      CHECK(status.message().find("the partial checkpoint was removed") != std::string::npos);
      c.check_next_save_succeeds();
    }
  }
}

TEST_CASE("too little free space refuses before writing anything") {
  FaultCase c;
  const std::vector<std::string> before = entries(c.dir.str());
  const int64_t needed = StateStore::bytes_to_write(parts_for(42));

  c.faults.reported_free_bytes = needed - 1;
  Status status = c.store.save(42, parts_for(42));
  CHECK(status.message() == c.dir.str() + "/: " + std::to_string(needed - 1) +
                                " bytes free, saving step 42 needs " + std::to_string(needed) +
                                " bytes; nothing was written; step-00000040 is intact");
  CHECK(c.faults.writes == 0);
  CHECK(entries(c.dir.str()) == before);

  // min_free_bytes counts too, and large amounts are shown in GiB (2^30).
  c.faults.reported_free_bytes = int64_t{1288490189};  // 1.20 GiB
  StateStore strict({c.dir.str(), 1, int64_t{1} << 31}, c.faults);
  status = strict.save(42, parts_for(42));
  CHECK(status.message() ==
        c.dir.str() + "/: 1.20 GiB free, saving step 42 needs " + std::to_string(needed) +
            " bytes (+2.00 GiB kept free); nothing was written; step-00000040 is intact");
  CHECK(c.faults.writes == 0);
  c.check_intact(status);
  // Exactly enough passes.
  c.faults.reported_free_bytes = needed;
  REQUIRE(c.store.save(42, parts_for(42)).is_ok());
  check_latest(c.dir.str(), 42, parts_for(42));
}

TEST_CASE("too little free space for the first checkpoint creates nothing") {
  TempDir dir;
  FaultInjectingFileSystem faults;
  faults.reported_free_bytes = 0;
  StateStore store({dir.file("run1/checkpoints")}, faults);
  const Status status = store.save(1, parts_for(1));
  CHECK(status.message().find("0 bytes free") != std::string::npos);
  CHECK(status.message().find("no checkpoint existed before") != std::string::npos);
  CHECK(entries(dir.str()).empty());
}

TEST_CASE("a failed rename into place loses nothing") {
  FaultCase c;
  c.faults.fail_rename = 1;
  const Status status = c.store.save(42, parts_for(42));
  c.check_intact(status);
  CHECK(status.message().find("cannot rename to " + c.dir.str() +
                              "/step-00000042: Input/output error") != std::string::npos);
  c.check_next_save_succeeds();
}

TEST_CASE("a failed flush (fsync of a file or of the new directory) loses nothing") {
  for (int nth = 1; nth <= 5; ++nth) {
    CAPTURE(nth);
    FaultCase c;
    c.faults.fail_fsync = nth;
    const Status status = c.store.save(42, parts_for(42));
    c.check_intact(status);
    CHECK(status.message().find("cannot flush to disk (fsync): Input/output error") !=
          std::string::npos);
    c.check_next_save_succeeds();
  }
  FaultCase c;
  c.faults.fail_sync_directory = c.dir.str() + "/.step-00000042.tmp-" + std::to_string(::getpid());
  c.check_intact(c.store.save(42, parts_for(42)));
  c.check_next_save_succeeds();
}

TEST_CASE(
    "a failed flush of the parent after the rename reports it and removes no older checkpoint") {
  FaultCase c;  // keep = 1: a clean save would remove step 40
  c.faults.fail_sync_directory = c.dir.str();
  const Status status = c.store.save(42, parts_for(42));
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("step-00000042 is in place but") != std::string::npos);
  CHECK(status.message().find("no checkpoint was removed") != std::string::npos);
  CHECK(entries(c.dir.str()) == std::vector<std::string>{"step-00000040", "step-00000042"});
  check_latest(c.dir.str(), 42, parts_for(42));
  c.check_next_save_succeeds();
}

TEST_CASE("replacing a step whose rename fails keeps the earlier checkpoint of that step") {
  // Rename 1 moves the old step-40 aside, rename 2 moves the new one in.
  for (int nth = 1; nth <= 2; ++nth) {
    CAPTURE(nth);
    TempDir dir;
    FaultInjectingFileSystem faults;
    StateStore store({dir.str(), 1}, faults);
    REQUIRE(store.save(40, parts_for(40)).is_ok());
    faults.renames = 0;
    faults.fail_rename = nth;
    const Status status = store.save(40, {{"model.weights", "replacement"}});
    REQUIRE_FALSE(status.is_ok());
    CHECK(status.message().find("Input/output error") != std::string::npos);
    CHECK(status.message().find("step-00000040 is intact") != std::string::npos);
    CHECK(entries(dir.str()) == std::vector<std::string>{"step-00000040"});
    check_latest(dir.str(), 40, parts_for(40));
  }
}

TEST_CASE(
    "an old checkpoint that cannot be removed is a warning, not a failed save, and the next save "
    "retries") {
  FaultCase c;
  c.faults.fail_remove = true;
  REQUIRE(c.store.save(42, parts_for(42)).is_ok());
  REQUIRE(c.store.last_save_warnings().size() == 1);
  CHECK(c.store.last_save_warnings()[0].find("cannot remove") != std::string::npos);
  // Out of sight while waiting: never a half-removed step-N.
  CHECK(entries(c.dir.str()) ==
        std::vector<std::string>{".step-00000040.deleting", "step-00000042"});
  check_latest(c.dir.str(), 42, parts_for(42));

  c.faults.fail_remove = false;
  c.faults.renames = 0;
  c.faults.fail_rename = 2;  // 1 moves step 43 into place, 2 would move step 42 out of sight
  REQUIRE(c.store.save(43, parts_for(43)).is_ok());
  CHECK(c.store.last_save_warnings().size() == 1);
  CHECK(entries(c.dir.str()) == std::vector<std::string>{"step-00000042", "step-00000043"});
  c.faults.fail_rename = 0;
  REQUIRE(c.store.save(44, parts_for(44)).is_ok());
  CHECK(c.store.last_save_warnings().empty());
  CHECK(entries(c.dir.str()) == std::vector<std::string>{"step-00000044"});
}

// A crash after every possible number of file-system operations: whatever is
// left on disk, a fresh process loads a complete checkpoint (the old or the
// new one, never a mix and never nothing), and its next save cleans up.
void check_crash_at_every_point(int64_t saved_step, const Parts& newer) {
  int total = 0;
  {
    TempDir dir;
    FaultInjectingFileSystem counting;
    counting.crash_after = 1 << 30;
    StateStore store({dir.str(), 1}, counting);
    REQUIRE(store.save(40, parts_for(40)).is_ok());
    counting.mutations = 0;
    REQUIRE(store.save(saved_step, newer).is_ok());
    total = counting.mutations;
  }
  REQUIRE(total > 5);
  for (int crash_after = 0; crash_after <= total; ++crash_after) {
    CAPTURE(crash_after);
    TempDir dir;
    FaultInjectingFileSystem faults;
    StateStore store({dir.str(), 1}, faults);
    REQUIRE(store.save(40, parts_for(40)).is_ok());
    faults.crash_after = crash_after;
    faults.mutations = 0;
    (void)store.save(saved_step, newer);

    std::optional<LoadedState> state = load(dir.str());  // a new process, the real file system
    REQUIRE(state.has_value());
    CHECK(state->skipped.empty());
    const bool is_new = state->step == saved_step && state->parts == newer;
    const bool is_old = state->step == 40 && state->parts == parts_for(40);
    CHECK((is_new || is_old));
    CHECK(((crash_after < total) || is_new));

    StateStore next({dir.str(), 1});
    REQUIRE(next.save(99, parts_for(99)).is_ok());
    CHECK(next.last_save_warnings().empty());
    CHECK(entries(dir.str()) == std::vector<std::string>{"step-00000099"});
  }
}

TEST_CASE(
    "a crash at any point of a save leaves the old or the new checkpoint, and the next save cleans "
    "up") {
  check_crash_at_every_point(42, parts_for(42));
}

TEST_CASE("a crash at any point of replacing a step leaves that step's old or new checkpoint") {
  check_crash_at_every_point(40, {{"model.weights", "replacement"}, {"extra", "x"}});
}

TEST_CASE("a leftover temporary directory is ignored by load and removed by the next save") {
  TempDir dir;
  StateStore store({dir.str()});
  REQUIRE(store.save(40, parts_for(40)).is_ok());
  // A complete-looking temporary directory of a newer step: still not loaded.
  fs::copy(dir.file("step-00000040"), dir.file(".step-00000050.tmp-12345"));
  fs::create_directory(dir.file(".step-00000030.deleting"));
  put(dir.file("notes.txt"), "the user's own file");
  check_latest(dir.str(), 40, parts_for(40));
  CHECK(store.steps().value() == std::vector<int64_t>{40});
  REQUIRE(store.save(41, parts_for(41)).is_ok());
  CHECK(entries(dir.str()) ==
        std::vector<std::string>{"notes.txt", "step-00000040", "step-00000041"});
}

// Damage to the newest checkpoint: load falls back to the previous one and
// says why in `skipped`.
void check_fallback(const std::function<void(const std::string& newest)>& damage,
                    const std::string& why) {
  CAPTURE(why);
  TempDir dir;
  StateStore store({dir.str(), 2});
  REQUIRE(store.save(40, parts_for(40)).is_ok());
  REQUIRE(store.save(42, parts_for(42)).is_ok());
  damage(dir.file("step-00000042"));
  std::optional<LoadedState> state = load(dir.str());
  REQUIRE(state.has_value());
  CHECK(state->step == 40);
  CHECK(state->parts == parts_for(40));
  REQUIRE(state->skipped.size() == 1);
  CHECK(state->skipped[0].find(dir.file("step-00000042/")) == 0);
  CHECK(state->skipped[0].find(why) != std::string::npos);
}

TEST_CASE("a damaged newest checkpoint is skipped and reported") {
  check_fallback(
      [](const std::string& newest) {
        std::string data = slurp(newest + "/model.weights");
        data[5000] = static_cast<char>(data[5000] ^ 0x01);  // one flipped bit
        put(newest + "/model.weights", data);
      },
      "model.weights: checksum mismatch");
  check_fallback([](const std::string& newest) { fs::resize_file(newest + "/optimizer", 3); },
                 "optimizer: 3 bytes, the manifest says 13");
  check_fallback([](const std::string& newest) { fs::remove(newest + "/run_state"); },
                 "run_state: no such file");
  check_fallback(
      [](const std::string& newest) {
        const std::string manifest = slurp(newest + "/MANIFEST");
        put(newest + "/MANIFEST", manifest.substr(0, manifest.size() / 2));
      },
      "MANIFEST: invalid JSON");
  check_fallback([](const std::string& newest) { fs::remove(newest + "/MANIFEST"); },
                 "MANIFEST: no such file");
}

TEST_CASE("when no checkpoint verifies, load_latest is an error listing each") {
  TempDir dir;
  StateStore store({dir.str(), 2});
  REQUIRE(store.save(40, parts_for(40)).is_ok());
  REQUIRE(store.save(42, parts_for(42)).is_ok());
  fs::remove(dir.file("step-00000040/MANIFEST"));
  fs::remove(dir.file("step-00000042/MANIFEST"));
  Result<std::optional<LoadedState>> loaded = store.load_latest();
  REQUIRE_FALSE(loaded.is_ok());
  CHECK(loaded.message().find("no checkpoint verifies") != std::string::npos);
  CHECK(loaded.message().find("step-00000040/MANIFEST") != std::string::npos);
  CHECK(loaded.message().find("step-00000042/MANIFEST") != std::string::npos);
}

TEST_CASE("hostile manifests are rejected with a reason, never followed") {
  const auto manifest = [](const std::string& parts, const std::string& step = "41") {
    return R"({"format": "headroom.training_state", "version": 1, "step": )" + step +
           R"(, "parts": [)" + parts + "]}";
  };
  const auto part = [](const std::string& name, const std::string& bytes, const std::string& crc) {
    return R"({"name": )" + name + R"(, "bytes": )" + bytes + R"(, "crc32c": )" + crc + "}";
  };
  struct Hostile {
    std::string text;
    std::string why;
    bool manifest_parses = false;  // the damage is in a part: steps() still lists the checkpoint
  };
  const std::string x_crc = "\"a93c5f93\"";  // CRC-32C of "x"
  const std::vector<Hostile> cases = {
      {"", "invalid JSON"},
      {"[]", "expected a JSON object"},
      {std::string("{\"format\": \"headroom.training_state\"\0}", 39), "invalid JSON"},
      {R"({"format": "x", "version": 1, "step": 41, "parts": []})", "format: expected"},
      {R"({"format": "headroom.training_state", "version": 2, "step": 41, "parts": []})",
       "version: 2"},
      {R"({"format": "headroom.training_state", "version": "1", "step": 41, "parts": []})",
       "version: \"1\""},
      {manifest(part("\"p\"", "1", x_crc), "40"), "step: 40 (expected 41"},
      {manifest(part("\"p\"", "1", x_crc), "41.0"), "step: 41.0"},
      {manifest(part("\"p\"", "1", x_crc), "-41"), "step: -41"},
      {manifest(""), "parts: expected a non-empty array"},
      {R"({"format": "headroom.training_state", "version": 1, "step": 41, "parts": {"p": 1}})",
       "parts: expected"},
      {R"({"format": "headroom.training_state", "version": 1, "step": 41})", "missing \"parts\""},
      {R"({"format": "headroom.training_state", "version": 1, "step": 41, "parts": [], "x": 1})",
       "unknown key \"x\""},
      {R"({"format": "headroom.training_state", "format": "headroom.training_state"})",
       "duplicate key"},
      {manifest(part("\"../x\"", "1", x_crc)), "parts[0].name: \"../x\""},
      {manifest(part("\"/etc/passwd\"", "1", x_crc)), "parts[0].name"},
      {manifest(part("\"a/b\"", "1", x_crc)), "parts[0].name"},
      {manifest(part("\"MANIFEST\"", "1", x_crc)), "parts[0].name"},
      {manifest(part("\".hidden\"", "1", x_crc)), "parts[0].name"},
      {manifest(part("\"..\"", "1", x_crc)), "parts[0].name"},
      {manifest(part("\"\"", "1", x_crc)), "parts[0].name"},
      {manifest(part("7", "1", x_crc)), "parts[0].name: 7"},
      {manifest(part("\"p\\u0000\"", "1", x_crc)), "parts[0].name"},
      {manifest(part("\"" + std::string(201, 'a') + "\"", "1", x_crc)), "parts[0].name"},
      {manifest(part("\"p\"", "1", x_crc) + "," + part("\"p\"", "1", x_crc)),
       "parts[1].name: \"p\" twice"},
      {manifest(part("\"p\"", "-1", x_crc)), "parts[0].bytes: expected a non-negative integer"},
      {manifest(part("\"p\"", "1e30", x_crc)), "parts[0].bytes: expected a non-negative integer"},
      {manifest(part("\"p\"", "18446744073709551615", x_crc)),
       "parts[0].bytes: expected a non-negative integer"},
      {manifest(part("\"p\"", "\"1\"", x_crc)), "parts[0].bytes: expected a non-negative integer"},
      {manifest(part("\"p\"", "9223372036854775807", x_crc)),
       "p: 1 bytes, the manifest says 9223372036854775807", true},
      {manifest(part("\"p\"", "1", "\"A93C5F93\"")),
       "parts[0].crc32c: expected 8 lowercase hex digits"},
      {manifest(part("\"p\"", "1", "\"a93c5f9\"")),
       "parts[0].crc32c: expected 8 lowercase hex digits"},
      {manifest(part("\"p\"", "1", "2432014819")),
       "parts[0].crc32c: expected 8 lowercase hex digits"},
      {manifest(part("\"p\"", "1", "\"00000000\"")), "p: checksum mismatch", true},
      {manifest(R"({"name": "p", "bytes": 1})"), "parts[0]: missing \"crc32c\""},
      {manifest("[1]"), "parts[0]: expected an object"},
      {std::string(100000, '[') + std::string(100000, ']'), "nested deeper"},
      {"{\"format\": \"\xff\xfe\"}", "invalid JSON"},
      {"{\"format\": 1e99999}", "format: number overflow"},
  };
  TempDir dir;
  StateStore store({dir.str()});
  REQUIRE(store.save(40, parts_for(40)).is_ok());
  fs::create_directory(dir.file("step-00000041"));
  put(dir.file("step-00000041/p"), "x");
  put(dir.file("x"), "outside");  // what "../x" would reach
  // The well-formed manifest loads, so each rejection below is for its own reason.
  put(dir.file("step-00000041/MANIFEST"), manifest(part("\"p\"", "1", x_crc)));
  std::optional<LoadedState> good = load(dir.str());
  REQUIRE(good.has_value());
  CHECK(good->step == 41);
  CHECK(good->parts == Parts{{"p", "x"}});

  for (const Hostile& hostile : cases) {
    CAPTURE(hostile.why);
    put(dir.file("step-00000041/MANIFEST"), hostile.text);
    std::optional<LoadedState> state = load(dir.str());
    REQUIRE(state.has_value());
    CHECK(state->step == 40);
    REQUIRE(state->skipped.size() == 1);
    CHECK(state->skipped[0].find(hostile.why) != std::string::npos);
    CHECK(store.steps().value() ==
          (hostile.manifest_parses ? std::vector<int64_t>{40, 41} : std::vector<int64_t>{40}));
  }

  // A MANIFEST too large to be one is not read at all.
  put(dir.file("step-00000041/MANIFEST"), std::string((16 << 20) + 1, ' '));
  std::optional<LoadedState> state = load(dir.str());
  REQUIRE(state.has_value());
  CHECK(state->skipped[0].find("bytes (expected at most 16777216)") != std::string::npos);
}

TEST_CASE("directory names that are not exactly step-<8 digits> are not checkpoints") {
  TempDir dir;
  StateStore store({dir.str()});
  REQUIRE(store.save(40, parts_for(40)).is_ok());
  for (const char* name :
       {"step-000000041", "step-0000041", "step-0000004x", "step--0000041", "Step-00000041"}) {
    fs::copy(dir.file("step-00000040"), dir.file(name));
  }
  check_latest(dir.str(), 40, parts_for(40));
}

TEST_CASE("bad arguments to save are refused before anything is written") {
  TempDir dir;
  FaultInjectingFileSystem counting;
  StateStore store({dir.str()}, counting);
  REQUIRE(store.save(40, parts_for(40)).is_ok());
  counting.writes = 0;
  const std::vector<std::string> before = entries(dir.str());
  for (const std::string& name :
       {std::string("../x"), std::string("MANIFEST"), std::string(".hidden"), std::string(""),
        std::string("a/b"), std::string("tab\there"), std::string(201, 'a')}) {
    CAPTURE(name);
    const Status status = store.save(41, {{"model", "x"}, {name, "y"}});
    CHECK(status.message().find("is not allowed") != std::string::npos);
    CHECK(status.message().find("nothing was written; step-00000040 is intact") !=
          std::string::npos);
  }
  CHECK(store.save(41, {}).message().find("no parts given") != std::string::npos);
  CHECK(store.save(-1, parts_for(1)).message().find("expected a step from 0 to 99999999") !=
        std::string::npos);
  CHECK_FALSE(store.save(100'000'000, parts_for(1)).is_ok());
  StateStore keep_none({dir.str(), 0}, counting);
  CHECK(keep_none.save(41, parts_for(41)).message().find("keep is 0") != std::string::npos);
  CHECK(counting.writes == 0);
  CHECK(entries(dir.str()) == before);
  CHECK(store.save(99'999'999, parts_for(1)).is_ok());
  CHECK(fs::exists(dir.file("step-99999999")));
}

}  // namespace
}  // namespace headroom::executor

namespace headroom::executor {
namespace {

// Two ranks' stores of one directory saving step `step` together, as the
// trainer's shared save runs them (rank 0 begins and commits).
Status shared_save(StateStore& rank0, StateStore& rank1, int64_t step, const Parts& of0, const Parts& of1) {
  int64_t bytes = 0;
  std::vector<std::string> names;
  for (const Parts* parts : {&of0, &of1}) {
    for (const auto& [name, contents] : *parts) {
      bytes += StateStore::bytes_on_disk(static_cast<int64_t>(contents.size()));
      names.push_back(name);
    }
  }
  if (Status s = rank0.begin_shared_save(step, bytes + StateStore::shared_save_overhead(names)); !s.is_ok()) return s;
  std::vector<WrittenPart> written;
  for (auto [store, parts] : {std::pair{&rank0, &of0}, std::pair{&rank1, &of1}}) {
    for (const auto& [name, contents] : *parts) {
      Result<WrittenPart> part = store->write_shared_part(step, name, contents);
      if (!part.is_ok()) return rank0.abandon_shared_save(step, part.status());
      written.push_back(part.value());
    }
  }
  return rank0.commit_shared_save(step, written);
}

const Parts kRank0 = {{"run.json", "{\"step\": 2}"}, {"optimizer.rank-00000-of-00002.pt", std::string(5000, 'a')}};
const Parts kRank1 = {{"optimizer.rank-00001-of-00002.pt", std::string(7000, 'b')}};

}  // namespace

TEST_CASE("two ranks save one checkpoint together: one MANIFEST lists every rank's parts") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  StateStore rank0({ckpt}), rank1({ckpt});
  REQUIRE(shared_save(rank0, rank1, 2, kRank0, kRank1).is_ok());
  CHECK(entries(ckpt) == std::vector<std::string>{"step-00000002"});
  Parts all = kRank0;
  all.insert(kRank1.begin(), kRank1.end());
  check_latest(ckpt, 2, all);

  // A rank reads what every rank holds and its own partition; the other
  // rank's part is only checked for its size.
  LoadRequest request;
  request.wanted = [](const std::string& name) { return name.find("rank-00001") == std::string::npos; };
  Result<std::optional<LoadedState>> mine = rank0.load_latest(request);
  REQUIRE(mine.is_ok());
  REQUIRE(mine.value().has_value());
  CHECK(mine.value()->parts == kRank0);
  CHECK(mine.value()->names.size() == 3);
}

TEST_CASE("a rank whose part cannot be written leaves no checkpoint, and the earlier one intact") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  StateStore rank0({ckpt});
  REQUIRE(shared_save(rank0, rank0, 2, kRank0, kRank1).is_ok());
  FaultInjectingFileSystem faulty;
  faulty.fail_write = 1;  // rank 1's first part
  StateStore broken_rank1({ckpt}, faulty);
  Status saved = shared_save(rank0, broken_rank1, 4, kRank0, kRank1);
  REQUIRE_FALSE(saved.is_ok());
  CHECK(saved.message().find("saving step 4 failed") != std::string::npos);
  CHECK(saved.message().find("step-00000002 is intact") != std::string::npos);
  CHECK(entries(ckpt) == std::vector<std::string>{"step-00000002"});
  Parts all = kRank0;
  all.insert(kRank1.begin(), kRank1.end());
  check_latest(ckpt, 2, all);
}

TEST_CASE("a shared save refuses a disk without room for every rank's parts before writing") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  FaultInjectingFileSystem small;
  small.reported_free_bytes = 12 * 1024;  // rank 0's parts fit, not rank 1's as well
  StateStore rank0({ckpt}, small), rank1({ckpt}, small);
  Status saved = shared_save(rank0, rank1, 2, kRank0, kRank1);
  REQUIRE_FALSE(saved.is_ok());
  CHECK(saved.message().find("nothing was written") != std::string::npos);
  CHECK_FALSE(fs::exists(ckpt + "/step-00000002"));
}

TEST_CASE("load_latest at_most_step takes the newest checkpoint at or before it") {
  TempDir dir;
  StateStore store({dir.str(), 3});
  for (int64_t step : {2, 4, 6}) REQUIRE(store.save(step, parts_for(step)).is_ok());
  LoadRequest request;
  request.at_most_step = 5;
  Result<std::optional<LoadedState>> loaded = store.load_latest(request);
  REQUIRE(loaded.is_ok());
  REQUIRE(loaded.value().has_value());
  CHECK(loaded.value()->step == 4);
  CHECK(loaded.value()->parts == parts_for(4));
  request.at_most_step = 1;
  loaded = store.load_latest(request);
  REQUIRE(loaded.is_ok());
  CHECK_FALSE(loaded.value().has_value());
}

TEST_CASE("a part another rank reads is still checked for its size") {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  StateStore rank0({ckpt, 2}), rank1({ckpt, 2});
  REQUIRE(shared_save(rank0, rank1, 2, kRank0, kRank1).is_ok());
  REQUIRE(shared_save(rank0, rank1, 4, kRank0, kRank1).is_ok());
  put(ckpt + "/step-00000004/optimizer.rank-00001-of-00002.pt", "truncated");
  LoadRequest request;
  request.wanted = [](const std::string& name) { return name.find("rank-00001") == std::string::npos; };
  Result<std::optional<LoadedState>> loaded = rank0.load_latest(request);
  REQUIRE(loaded.is_ok());
  REQUIRE(loaded.value().has_value());
  CHECK(loaded.value()->step == 2);
  REQUIRE(loaded.value()->skipped.size() == 1);
  CHECK(loaded.value()->skipped[0].find("truncated or overwritten") != std::string::npos);
}

}  // namespace headroom::executor
