#include "executor/token_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "graph/atomic_file.h"

namespace headroom::executor {

struct TokenSource::File {
  std::string path;
  int fd = -1;
  int token_bytes = 4;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// A little-endian id of `width` bytes.
uint64_t decode(const unsigned char* bytes, int width) {
  uint64_t id = 0;
  for (int b = width - 1; b >= 0; --b) id = (id << 8) | bytes[b];
  return id;
}

}  // namespace

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

TokenSource TokenSource::synthetic(int64_t vocab, uint64_t seed) {
  TokenSource source;
  source.vocab_ = vocab;
  source.seed_ = seed;
  return source;
}

Result<TokenSource> TokenSource::open_file(const std::string& path, int token_bytes, int64_t vocab, int64_t seq) {
  auto file = std::make_shared<File>();
  file->path = path;
  file->token_bytes = token_bytes;
  // Never blocks (a FIFO is refused at once) and refuses anything but a regular file.
  Result<int> fd = graph::open_regular_file(path);
  if (!fd.is_ok()) return fd.status();
  file->fd = fd.value();
  struct stat info {};
  if (::fstat(file->fd, &info) != 0)
    return Status::io(path + ": cannot stat: " + std::strerror(errno));
  if (info.st_size % token_bytes != 0) {
    return Status::invalid_input(path + ": " + std::to_string(info.st_size) +
                                 " bytes is not a whole number of " + std::to_string(token_bytes) +
                                 "-byte token ids (expected raw little-endian uint" +
                                 std::to_string(8 * token_bytes) + "; see --token-bytes)");
  }
  TokenSource source;
  source.file_ = std::move(file);
  source.vocab_ = vocab;
  source.tokens_ = info.st_size / token_bytes;
  if (source.tokens_ < seq) {
    return Status::invalid_input(path + ": holds " + std::to_string(source.tokens_) +
                                 " tokens, expected at least one " + "sequence of " +
                                 std::to_string(seq));
  }
  if (Status ids = source.check_ids(); !ids.is_ok()) return ids;
  return source;
}

// One pass over the file before training: an id past the vocabulary would
// otherwise stop the run only when a window reaches it, hours in.
Status TokenSource::check_ids() const {
  constexpr int64_t kChunkTokens = int64_t{1} << 18;
  const int width = file_->token_bytes;
  std::vector<unsigned char> bytes(static_cast<size_t>(kChunkTokens * width));
  for (int64_t first = 0; first < tokens_; first += kChunkTokens) {
    const int64_t count = std::min(kChunkTokens, tokens_ - first);
    size_t done = 0;
    const size_t want = static_cast<size_t>(count * width);
    while (done < want) {
      const ssize_t n = ::pread(file_->fd, bytes.data() + done, want - done, static_cast<off_t>(first * width) +
                                                                             static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return Status::io(file_->path + ": cannot read tokens at position " +
                          std::to_string(first) + ": " +
                          (n < 0 ? std::strerror(errno) : "unexpected end of file"));
      }
      done += static_cast<size_t>(n);
    }
    for (int64_t t = 0; t < count; ++t) {
      const uint64_t id = decode(bytes.data() + t * width, width);
      if (id >= static_cast<uint64_t>(vocab_)) {
        return Status::invalid_input(
            file_->path + ": token " + std::to_string(first + t) + " is " + std::to_string(id) +
            ", expected an id below the model's vocabulary size " + std::to_string(vocab_) +
            " (the whole file is checked before training)");
      }
    }
  }
  return Status::ok();
}

Result<std::vector<int64_t>> TokenSource::sample(int64_t index, int64_t seq) const {
  std::vector<int64_t> out(static_cast<size_t>(seq));
  if (!file_) {
    const uint64_t r = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(index)));
    const int64_t start = static_cast<int64_t>(r % static_cast<uint64_t>(vocab_));
    constexpr int64_t kStrides[] = {1, 2, 3, 5, 7};
    const int64_t stride = kStrides[(r >> 32) % 5];
    for (int64_t t = 0; t < seq; ++t) out[static_cast<size_t>(t)] = (start + stride * t) % vocab_;
    return out;
  }
  const int64_t windows = tokens_ - seq + 1;
  const int64_t first = static_cast<int64_t>((static_cast<uint64_t>(index) * static_cast<uint64_t>(seq)) %
                                             static_cast<uint64_t>(windows));
  const int width = file_->token_bytes;
  std::vector<unsigned char> bytes(static_cast<size_t>(seq * width));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(file_->fd, bytes.data() + done, bytes.size() - done,
                              static_cast<off_t>(first * width + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::io(file_->path + ": cannot read tokens at position " + std::to_string(first) +
                        ": " + (n < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    done += static_cast<size_t>(n);
  }
  for (int64_t t = 0; t < seq; ++t) {
    const uint64_t id = decode(bytes.data() + t * width, width);
    if (id >= static_cast<uint64_t>(vocab_)) {
      return Status::invalid_input(
          file_->path + ": token " + std::to_string(first + t) + " is " + std::to_string(id) +
          ", expected an id below the model's vocabulary size " + std::to_string(vocab_));
    }
    out[static_cast<size_t>(t)] = static_cast<int64_t>(id);
  }
  return out;
}

}  // namespace headroom::executor
