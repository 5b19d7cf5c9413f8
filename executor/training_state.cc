#include "executor/training_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "executor/communicator.h"
#include "executor/crc32c.h"
#include "executor/run_state.h"
#include "executor/sharded_checkpoint.h"
#include "executor/status_error.h"

namespace headroom::executor {
namespace {

std::string serialize_parameters(const NamedParameters& parameters) {
  torch::serialize::OutputArchive archive;
  for (const auto& [name, tensor] : parameters) archive.write(name, tensor.detach().cpu());
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_parameters(const std::string& bytes, const NamedParameters& parameters, const std::string& origin) {
  torch::NoGradGuard no_grad;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  for (const auto& [name, tensor] : parameters) {
    torch::Tensor value;
    if (!archive.try_read(name, value) || value.sizes() != tensor.sizes()) {
      throw StatusError(Status::invalid_input(origin + ": model: parameter \"" + name +
                                              "\" missing or of another shape"));
    }
    tensor.copy_(value);
  }
}

// The RNG streams a step draws from (dropout): the CPU generator and, on CUDA, the device's.
std::string serialize_rng(torch::Device device) {
  torch::serialize::OutputArchive archive;
  archive.write("cpu", at::detail::getDefaultCPUGenerator().get_state());
  if (device.is_cuda()) archive.write("cuda", at::cuda::detail::getDefaultCUDAGenerator(device.index()).get_state());
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_rng(const std::string& bytes, torch::Device device) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  torch::Tensor state;
  archive.read("cpu", state);
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  cpu.set_state(state);
  if (device.is_cuda() && archive.try_read("cuda", state)) {
    at::Generator cuda = at::cuda::detail::getDefaultCUDAGenerator(device.index());
    cuda.set_state(state);
  }
}

// A digest of every parameter's name, shape and trainability: part of the
// run's identity, so a checkpoint never resumes into a model that changed
// under the same path (run_state.h).
std::string parameters_digest(torch::nn::Module& module) {
  std::string listing;
  int64_t count = 0;
  for (const auto& item : module.named_parameters()) {
    listing += item.key() + " " + c10::str(item.value().sizes()) + (item.value().requires_grad() ? " trains\n" : "\n");
    ++count;
  }
  char text[64];
  std::snprintf(text, sizeof text, "crc32c %08x of %lld tensors", crc32c(listing), static_cast<long long>(count));
  return text;
}

// ZeRO-3: the elements of a parameter that `rank` holds, [rank x chunk, ...)
// of the flattened parameter (zero3_parameters.h), without the padding of the
// last rank's chunk: where they begin, and how many (0: none).
std::pair<int64_t, int64_t> owned_elements(const PartitionedParameter& p, int rank) {
  const int64_t begin = rank * p.shard.numel();
  const int64_t numel = c10::multiply_integers(p.shape);
  return {begin, std::max<int64_t>(0, std::min<int64_t>(p.shard.numel(), numel - begin))};
}

// ZeRO-3: this rank's chunk of every trainable parameter it holds elements of.
std::vector<ParameterSlice> model_slices(const TrainingState& state) {
  std::vector<ParameterSlice> slices;
  for (const auto& [name, tensor] : state.model.trainable()) {
    const PartitionedParameter p = state.zero3->partition_of(tensor);
    const auto [begin, elements] = owned_elements(p, state.rank);
    if (elements > 0) slices.push_back({name, p.shape, begin, {{"value", p.shard.narrow(0, 0, elements)}}});
  }
  return slices;
}

// ZeRO-3 resumed by as many ranks: this rank's own model part straight into its
// partitions; false (nothing changed) when its slices are not exactly those.
bool load_model_partition(const std::string& bytes, const std::string& origin, const TrainingState& state) {
  Result<ReadRankPart> part = read_rank_part(bytes, origin);
  if (!part.is_ok()) throw StatusError(part.status());
  const std::vector<ParameterSlice> mine = model_slices(state);
  if (part->rank != state.rank || part->world != state.world || part->slices.size() != mine.size()) return false;
  std::map<std::string, const ParameterSlice*> saved;
  for (const ParameterSlice& slice : part->slices) saved[slice.parameter] = &slice;
  for (const ParameterSlice& slice : mine) {
    auto found = saved.find(slice.parameter);
    if (found == saved.end() || found->second->begin != slice.begin || found->second->shape != slice.shape ||
        found->second->states.size() != 1 || found->second->states[0].first != "value" ||
        found->second->states[0].second.numel() != slice.states[0].second.numel()) {
      return false;
    }
  }
  torch::NoGradGuard no_grad;
  for (const ParameterSlice& slice : mine) {
    torch::Tensor into = slice.states[0].second;  // a view of the partition
    into.copy_(saved.at(slice.parameter)->states[0].second);
  }
  return true;
}

// ZeRO-3 from whole parameters: each rank keeps its chunk, no collective (the
// ranks may reach here on different paths).
void load_parameters_into_partitions(const std::string& bytes, const TrainingState& state, const std::string& origin) {
  torch::NoGradGuard no_grad;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  for (const auto& [name, tensor] : state.model.trainable()) {
    const PartitionedParameter p = state.zero3->partition_of(tensor);
    torch::Tensor value;
    if (!archive.try_read(name, value) || value.sizes().vec() != p.shape) {
      throw StatusError(Status::invalid_input(origin + ": model: parameter \"" + name +
                                              "\" missing or of another shape"));
    }
    const auto [begin, elements] = owned_elements(p, state.rank);
    if (elements > 0) p.shard.narrow(0, 0, elements).copy_(value.reshape(-1).narrow(0, begin, elements));
  }
}

// Every rank's part of `kind` in the checkpoint of `step`, read and verified
// (a re-partition needs them all).
Result<std::map<std::string, std::string>> read_rank_parts(const StateStore& store, int64_t step,
                                                           const std::string& kind) {
  LoadRequest request;
  request.wanted = [&](const std::string& name) {
    const std::optional<RankPart> part = parse_rank_part_name(name);
    return part && part->kind == kind;
  };
  request.at_most_step = step;
  Result<std::optional<LoadedState>> loaded = store.load_latest(request);
  if (!loaded.is_ok()) return loaded.status();
  if (!loaded.value() || loaded.value()->step != step) {
    return Status::io(
        checkpoint_path(store.options().directory, step) +
        ": no longer verifies while its rank parts are read (changed during the resume?)");
  }
  return std::move(loaded.value()->parts);
}

bool has_rank_parts(const LoadedState& saved, const std::string& kind) {
  for (const std::string& name : saved.names) {
    const std::optional<RankPart> part = parse_rank_part_name(name);
    if (part && part->kind == kind) return true;
  }
  return false;
}

}  // namespace

void LossScaler::update(bool finite) {
  if (!enabled) return;
  if (!finite) {
    scale *= 0.5;
    clean_steps = 0;
  } else if (++clean_steps == 2000) {
    scale *= 2.0;
    clean_steps = 0;
  }
}

nlohmann::json training_identity(const planner::Plan& plan, const RunOptions& options, TrainModel& model) {
  return run_identity(plan, options, parameters_digest(model.module()));
}

std::vector<std::string> rank_part_kinds(const TrainingState& state) {
  if (!state.optimizer.partitioned()) return {};
  if (state.zero3) return {"model", "optimizer"};
  return {"optimizer"};
}

std::map<std::string, std::string> checkpoint_parts(int64_t step, const nlohmann::json& identity,
                                                    const TrainingState& state) {
  std::map<std::string, std::string> parts;
  const bool partitioned = state.optimizer.partitioned();
  if (state.rank == 0) {
    parts["run.json"] = run_state_text(RunState{step, identity, state.scaler.scale, state.scaler.clean_steps});
    parts["rng.pt"] = serialize_rng(state.device);
    if (!state.zero3) parts["model.pt"] = serialize_parameters(state.model.trainable());
    if (!partitioned) parts["optimizer.pt"] = state.optimizer.save();
  }
  if (partitioned) {
    parts[rank_part_name("optimizer", state.rank, state.world)] = state.optimizer.save();
    if (state.zero3) {
      parts[rank_part_name("model", state.rank, state.world)] =
          write_rank_part(state.rank, state.world, {}, model_slices(state));
    }
  }
  return parts;
}

Result<Resumed> resume_training(const std::string& directory, FileSystem& file_system,
                                const nlohmann::json& identity, const TrainingState& state,
                                const AgreeOnStep& agree) {
  StateStoreOptions options;
  options.directory = directory;
  const StateStore store(options, file_system);
  // The parts every rank holds, and this rank's own partition of a job of as many ranks.
  LoadRequest request;
  request.wanted = [&](const std::string& name) {
    const std::optional<RankPart> part = parse_rank_part_name(name);
    return !part || (part->rank == state.rank && part->world == state.world);
  };
  std::optional<LoadedState> found;
  Status failed = Status::ok();
  for (;;) {
    Result<std::optional<LoadedState>> loaded = store.load_latest(request);
    found.reset();
    if (!loaded.is_ok()) {
      failed = loaded.status();
    } else if (!loaded.value().has_value()) {
      failed = Status::invalid_input("--resume " + directory +
                                     ": holds no complete checkpoint to resume from");
    } else {
      found = std::move(loaded.value());
      failed = Status::ok();
    }
    Result<std::vector<int64_t>> proposals = agree(found ? found->step : -1);
    if (!proposals.is_ok()) return proposals.status();
    const auto [oldest, newest] = std::minmax_element(proposals->begin(), proposals->end());
    if (*oldest == *newest) break;  // every rank reads the same checkpoint, or none has one
    if (*oldest < 0) {
      if (!found) return failed;
      return Status::invalid_input("--resume " + directory +
                                   ": another rank of the job finds no checkpoint there that "
                                   "verifies (its message says why)");
    }
    request.at_most_step = *oldest;  // the newest every rank can read
  }
  if (!found) return failed;
  const LoadedState& saved = *found;
  for (const char* part : {"run.json", "rng.pt"}) {
    if (!saved.parts.count(part))
      return Status::invalid_input(saved.path + ": checkpoint lacks the part " + part);
  }
  const std::string origin = saved.path + "/run.json";
  Result<RunState> run = parse_run_state(saved.parts.at("run.json"), origin, saved.step);
  if (!run.is_ok()) return run.status();
  if (Status same = check_identity(run->identity, identity, origin); !same.is_ok()) return same;

  // The model: whole, or ZeRO-3's partitions (this rank's own, else all assembled).
  std::string whole_model;
  if (saved.parts.count("model.pt")) {
    whole_model = saved.parts.at("model.pt");
  } else if (has_rank_parts(saved, "model")) {
    const std::string own = rank_part_name("model", state.rank, state.world);
    if (!(state.zero3 && saved.parts.count(own) && load_model_partition(saved.parts.at(own), saved.path + "/" + own, state))) {
      Result<std::map<std::string, std::string>> parts = read_rank_parts(store, saved.step, "model");
      if (!parts.is_ok()) return parts.status();
      Result<std::string> assembled = assemble_whole(parts.value(), saved.path);
      if (!assembled.is_ok()) return assembled.status();
      whole_model = std::move(assembled.value());
    }
  } else {
    return Status::invalid_input(saved.path + ": checkpoint lacks the part model.pt");
  }
  if (!whole_model.empty()) {
    if (state.zero3) {
      load_parameters_into_partitions(whole_model, state, saved.path);
    } else {
      load_parameters(whole_model, state.model.trainable(), saved.path);
    }
  }

  // The optimizer: whole, or each rank's partition (this rank's own, else all assembled).
  if (saved.parts.count("optimizer.pt")) {
    state.optimizer.load(saved.parts.at("optimizer.pt"), saved.path);
  } else if (has_rank_parts(saved, "optimizer")) {
    const std::string own = rank_part_name("optimizer", state.rank, state.world);
    if (!(saved.parts.count(own) && state.optimizer.load_partition(saved.parts.at(own), saved.path + "/" + own))) {
      Result<std::map<std::string, std::string>> parts = read_rank_parts(store, saved.step, "optimizer");
      if (!parts.is_ok()) return parts.status();
      Result<std::string> assembled = assemble_whole(parts.value(), saved.path);
      if (!assembled.is_ok()) return assembled.status();
      state.optimizer.load(assembled.value(), saved.path);
    }
  } else {
    return Status::invalid_input(saved.path + ": checkpoint lacks the part optimizer.pt");
  }
  load_rng(saved.parts.at("rng.pt"), state.device);
  state.scaler.scale = run->loss_scale;
  state.scaler.clean_steps = run->clean_steps;
  return Resumed{saved.step, saved.path, saved.skipped};
}

Status save_sharded_checkpoint(int64_t step, const std::map<std::string, std::string>& parts,
                               const TrainingState& state, StateStore& store, Communicator& comm,
                               const AgreeOnStatus& agree) {
  const int rank = state.rank;
  const int world = state.world;
  const bool leader = rank == 0;
  const std::string what = "checkpoint of step " + std::to_string(step);
  const std::vector<std::string> kinds = rank_part_kinds(state);
  // What every rank's parts take on disk, for rank 0's free-space check.
  int64_t mine = 0;
  for (const auto& [name, contents] : parts) mine += StateStore::bytes_on_disk(static_cast<int64_t>(contents.size()));
  torch::Tensor total = torch::full({1}, mine, torch::kLong);
  if (Status s = comm.all_reduce_sum(total); !s.is_ok()) return s;
  std::vector<std::string> names;
  for (const auto& [name, contents] : parts) {
    if (!parse_rank_part_name(name)) names.push_back(name);
  }
  for (int r = 0; r < world; ++r) {
    for (const std::string& kind : kinds) names.push_back(rank_part_name(kind, r, world));
  }
  Status begun = leader ? store.begin_shared_save(step, total.item<int64_t>() + StateStore::shared_save_overhead(names))
                          : Status::ok();
  if (Status s = agree(begun, what); !s.is_ok()) return s;

  std::vector<WrittenPart> written;
  Status wrote = Status::ok();
  for (const auto& [name, contents] : parts) {
    Result<WrittenPart> part = store.write_shared_part(step, name, contents);
    if (!part.is_ok()) {
      wrote = part.status();
      break;
    }
    written.push_back(part.value());
  }
  if (Status s = agree(wrote, what); !s.is_ok()) {
    if (leader) return store.abandon_shared_save(step, s);
    return s;
  }
  // Every rank's (bytes, crc32c) of each of its rank parts, in `kinds` order, to rank 0.
  torch::Tensor records = torch::empty({static_cast<int64_t>(kinds.size()), 2}, torch::kLong);
  for (size_t k = 0; k < kinds.size(); ++k) {
    for (const WrittenPart& part : written) {
      if (part.name != rank_part_name(kinds[k], rank, world)) continue;
      records[k][0] = part.bytes;
      records[k][1] = static_cast<int64_t>(part.crc32c);
    }
  }
  torch::Tensor all = torch::empty({static_cast<int64_t>(world * kinds.size() * 2)}, torch::kLong);
  if (Status s = comm.all_gather(records.reshape(-1), all); !s.is_ok()) {
    if (leader) return store.abandon_shared_save(step, s);
    return s;
  }
  Status committed = Status::ok();
  if (leader) {
    std::vector<WrittenPart> manifest;
    for (const WrittenPart& part : written) {
      if (!parse_rank_part_name(part.name)) manifest.push_back(part);
    }
    for (int r = 0; r < world; ++r) {
      for (size_t k = 0; k < kinds.size(); ++k) {
        const int64_t at = static_cast<int64_t>((r * kinds.size() + k) * 2);
        manifest.push_back(WrittenPart{rank_part_name(kinds[k], r, world), all[at].item<int64_t>(),
                                       static_cast<uint32_t>(all[at + 1].item<int64_t>())});
      }
    }
    committed = store.commit_shared_save(step, manifest);
  }
  return agree(committed, what);
}

Status check_checkpoint_room(const StateStore& store, FileSystem& file_system, const RunOptions& options,
                             int64_t checkpoint_bytes) {
  Result<int64_t> free = store.free_bytes();
  if (!free.is_ok()) return free.status();
  Result<std::vector<int64_t>> present = file_system.exists(options.checkpoint_dir)
                                             ? store.steps()
                                             : Result<std::vector<int64_t>>(std::vector<int64_t>{});
  // Checkpoints already there count against the budget only up to `keep`: older ones are rotated out.
  const int64_t on_disk = present.is_ok() ? static_cast<int64_t>(present.value().size()) : 0;
  const int64_t to_write = std::max<int64_t>(1, options.checkpoints_kept + 1 - on_disk);
  const int64_t needed = to_write * checkpoint_bytes;
  if (free.value() >= needed) return Status::ok();
  return Status::io("--checkpoint-dir " + options.checkpoint_dir + ": " + format_bytes(free.value()) +
                    " free, but this run writes checkpoints of about " + format_bytes(checkpoint_bytes) +
                    " and needs room for " + std::to_string(to_write) + " more (--keep " +
                    std::to_string(options.checkpoints_kept) +
                    " plus the one being written): " + format_bytes(needed) +
                    "; nothing was trained. Free space, lower --keep, or choose another directory");
}

std::string checkpoint_path(const std::string& directory, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return directory + "/" + name;
}

}  // namespace headroom::executor
