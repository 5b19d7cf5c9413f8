// Token sequences for training decoder models, deterministic in the sample
// index (so a resumed run sees exactly the data an uninterrupted one would):
// a synthetic, learnable stream, or windows of a flat token file (raw
// little-endian uint16 or uint32 ids, as nanoGPT-style tokenizers write them;
// docs/executor.md "Data"). Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/status.h"

namespace headroom::executor {

class TokenSource {
 public:
  // Sample i is an arithmetic progression modulo `vocab` with a start and a
  // stride drawn from (seed, i): every next token follows from the two before
  // it, so a small decoder's loss falls well below ln(vocab) within tens of steps.
  static TokenSource synthetic(int64_t vocab, uint64_t seed);

  // A token file of `token_bytes` (2 or 4) per id. Checks that it is a regular
  // file (a FIFO is refused, never waited on), that the size is a whole number
  // of ids, that it holds at least one sequence of `seq` tokens, and that every
  // id is below `vocab` (one pass before training, naming the first bad one).
  static Result<TokenSource> open_file(const std::string& path, int token_bytes, int64_t vocab, int64_t seq);

  // `seq` tokens of sample `index`: for a file, the window starting at
  // (index * seq) mod (tokens - seq + 1). An id >= vocab is an error naming the
  // file and the token's position.
  Result<std::vector<int64_t>> sample(int64_t index, int64_t seq) const;

  int64_t file_tokens() const { return tokens_; }  // 0 for synthetic

 private:
  Status check_ids() const;

  struct File;
  std::shared_ptr<File> file_;
  int64_t vocab_ = 0;
  uint64_t seed_ = 0;
  int64_t tokens_ = 0;
};

// splitmix64 (Steele, Lea, Flood 2014): the per-sample generator of the
// synthetic data; exposed for the Flux latents, which draw their pool from it too.
uint64_t splitmix64(uint64_t x);

}  // namespace headroom::executor
