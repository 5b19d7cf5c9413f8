#include "executor/training_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "executor/crc32c.h"
#include "executor/run_state.h"

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
      throw std::runtime_error(origin + ": model: parameter \"" + name + "\" missing or of another shape");
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

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
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

std::map<std::string, std::string> checkpoint_parts(int64_t step, const nlohmann::json& identity,
                                                    const TrainingState& state) {
  std::map<std::string, std::string> parts;
  parts["run.json"] = run_state_text(RunState{step, identity, state.scaler.scale, state.scaler.clean_steps});
  parts["model.pt"] = serialize_parameters(state.model.trainable());
  parts["optimizer.pt"] = state.optimizer.save();
  parts["rng.pt"] = serialize_rng(state.device);
  return parts;
}

Result<Resumed> resume_training(const std::string& directory, FileSystem& file_system,
                                const nlohmann::json& identity, const TrainingState& state) {
  StateStoreOptions options;
  options.directory = directory;
  const StateStore store(options, file_system);
  Result<std::optional<LoadedState>> loaded = store.load_latest();
  if (!loaded.is_ok()) return loaded.status();
  if (!loaded.value().has_value()) {
    return Status::error("--resume " + directory + ": holds no complete checkpoint to resume from");
  }
  const LoadedState& saved = *loaded.value();
  for (const char* part : {"run.json", "model.pt", "optimizer.pt", "rng.pt"}) {
    if (!saved.parts.count(part)) return Status::error(saved.path + ": checkpoint lacks the part " + part);
  }
  const std::string origin = saved.path + "/run.json";
  Result<RunState> run = parse_run_state(saved.parts.at("run.json"), origin, saved.step);
  if (!run.is_ok()) return run.status();
  if (Status same = check_identity(run->identity, identity, origin); !same.is_ok()) return same;
  load_parameters(saved.parts.at("model.pt"), state.model.trainable(), saved.path);
  state.optimizer.load(saved.parts.at("optimizer.pt"), saved.path);
  load_rng(saved.parts.at("rng.pt"), state.device);
  state.scaler.scale = run->loss_scale;
  state.scaler.clean_steps = run->clean_steps;
  return Resumed{saved.step, saved.path, saved.skipped};
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
  return Status::error("--checkpoint-dir " + options.checkpoint_dir + ": " + gib(free.value()) +
                       " free, but this run writes checkpoints of about " + gib(checkpoint_bytes) +
                       " and needs room for " + std::to_string(to_write) + " more (--keep " +
                       std::to_string(options.checkpoints_kept) + " plus the one being written): " + gib(needed) +
                       "; nothing was trained. Free space, lower --keep, or choose another directory");
}

std::string checkpoint_path(const std::string& directory, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return directory + "/" + name;
}

}  // namespace headroom::executor
