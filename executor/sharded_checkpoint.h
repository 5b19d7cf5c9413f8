// Checkpoints of a sharded run (ZeRO-1/2/3, issue 11): every rank writes its
// own partition as a part of its own, "optimizer.rank-00001-of-00004.pt" (and
// "model.rank-00001-of-00004.pt" at stage 3, where the parameters are
// partitioned too), and rank 0 the parts that are the same on every rank
// (run.json, rng.pt, model.pt at stages 1 and 2); one MANIFEST lists them all
// (StateStore's shared save). Nothing is gathered to write a checkpoint, so no
// rank ever holds the whole state, as DeepSpeed's per-rank
// zero_pp_rank_R_mp_rank_00_optim_states.pt files (deepspeed/runtime/engine.py
// `_save_zero_checkpoint`).
//
// A rank part holds, for every parameter the rank owns elements of, the slice
// of each state, where the slice begins in the flattened parameter and the
// parameter's whole shape. So a part reads back on any number of ranks: a rank
// of a job of the same size and layout reads only its own part, any other
// job assembles each parameter's whole state from every rank's slices (a
// re-partition, as DeepSpeed's `elastic_checkpoint` does at stages 1 and 2,
// engine.py `_load_zero_checkpoint`).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/status.h"

namespace headroom::executor {

// "optimizer.rank-00001-of-00004.pt" for ("optimizer", 1, 4).
std::string rank_part_name(const std::string& kind, int rank, int world);

struct RankPart {
  std::string kind;  // "optimizer", "model"
  int rank = 0;
  int world = 1;
};
// The inverse of rank_part_name; nullopt for any other name.
std::optional<RankPart> parse_rank_part_name(const std::string& name);

// One parameter's elements [begin, begin + n) of each of its states ("exp_avg",
// ...; "value" for the parameter itself), 1-D, n the same for every state.
struct ParameterSlice {
  std::string parameter;
  std::vector<int64_t> shape;  // the whole parameter's
  int64_t begin = 0;
  std::vector<std::pair<std::string, torch::Tensor>> states;
};

// A rank part: `header` tensors (the optimizer kind, the step count) and the
// slices, serialized with torch's archive.
std::string write_rank_part(int rank, int world, const std::vector<std::pair<std::string, torch::Tensor>>& header,
                            const std::vector<ParameterSlice>& slices);

struct ReadRankPart {
  int rank = 0;
  int world = 1;
  std::map<std::string, torch::Tensor> header;
  std::vector<ParameterSlice> slices;
};
// Reads a part written by write_rank_part; a malformed one is an error naming `origin`.
Result<ReadRankPart> read_rank_part(const std::string& bytes, const std::string& origin);

// Every parameter's whole states from the parts of every rank of one job
// (`parts`: name -> contents, each a rank part of the same kind and world):
// keyed "<parameter>" for "value" and "<parameter>/<state>" otherwise, as the
// one-process checkpoint keys them, with rank 0's header tensors beside them.
// Serialized as that checkpoint's part ("model.pt", "optimizer.pt"), so the
// loaders of one process read it. Errors name the checkpoint: a rank's part
// missing, slices that overlap or leave elements uncovered, shapes that differ.
Result<std::string> assemble_whole(const std::map<std::string, std::string>& parts, const std::string& origin);

}  // namespace headroom::executor
