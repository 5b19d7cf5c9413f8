// train_plan(): trains a Plan with LibTorch and measures what the planner
// predicted. The loop is the planner's step: grad_accum micro-batches of
// micro_batch samples, each block kept, checkpointed or offloaded as the plan
// says, then one step of the plan's optimizer (executor/optimizer.h; AdamW on
// the CPU when the plan offloads the optimizer). Memory is read from the CUDA caching allocator, or
// on the CPU from the tracking allocator with CUDA's 512-byte rounding, at the
// points where the planner's categories can be told apart.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "executor/checkpoint.h"
#include "executor/cpu_memory.h"
#include "executor/executable_model.h"
#include "executor/host_memory.h"
#include "executor/offload.h"
#include "executor/optimizer.h"
#include "executor/crc32c.h"
#include "executor/run_state.h"
#include "executor/run.h"
#include "executor/state_store.h"
#include "executor/train_model.h"
#include "planner/block_profile.h"
#include "planner/model_states.h"
#include "planner/planner.h"
#include "planner/prediction.h"

namespace headroom::executor {
namespace {

namespace tm = models::torch_modules;
using Clock = std::chrono::steady_clock;

constexpr int64_t kCudaRounding = 512;  // torch.cuda.memory_allocated rounds requests to 512 B

// Live and peak bytes of the device the run trains on.
class MemoryProbe {
 public:
  explicit MemoryProbe(torch::Device device) : device_(device) {
    if (!device.is_cuda()) {
      cpu_ = &CpuMemoryTracker::install();
      cpu_->set_rounding(kCudaRounding);
    }
  }
  // The tracker is process-wide: later measurements in the process (tests run
  // one after another) count bytes as requested again. A free subtracts what
  // its allocation added, so tensors that outlive the run stay balanced.
  ~MemoryProbe() {
    if (cpu_) cpu_->set_rounding(1);
  }
  MemoryProbe(const MemoryProbe&) = delete;
  MemoryProbe& operator=(const MemoryProbe&) = delete;
  int64_t live() const {
    if (cpu_) return cpu_->live_bytes();
    return stat().allocated_bytes[kAggregate].current;
  }
  int64_t peak_allocated() const {
    if (cpu_) return cpu_->peak_bytes();
    return stat().allocated_bytes[kAggregate].peak;
  }
  int64_t peak_reserved() const {
    if (cpu_) return cpu_->peak_bytes();  // the CPU allocator keeps no cache
    return stat().reserved_bytes[kAggregate].peak;
  }
  void reset_peak() {
    if (cpu_) {
      cpu_->reset_peak();
    } else {
      c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
    }
  }
  void synchronize() const {
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  }

 private:
  static constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  c10::CachingDeviceAllocator::DeviceStats stat() const {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
  }
  torch::Device device_;
  CpuMemoryTracker* cpu_ = nullptr;
};

torch::ScalarType training_dtype(planner::Precision precision) {
  switch (precision) {
    case planner::Precision::kFp32: return torch::kFloat;
    case planner::Precision::kFp16Mixed: return torch::kHalf;
    case planner::Precision::kBf16Mixed:
    case planner::Precision::kBf16Pure: return torch::kBFloat16;
    case planner::Precision::kBf16Amp:
    case planner::Precision::kFp16Amp: return torch::kFloat;  // refused by check_executable
  }
  return torch::kFloat;
}

// What the planner predicts for the categories the run can measure apart.
struct Predicted {
  int64_t parameters = 0;
  int64_t optimizer = 0;  // states + master weights on the device
  int64_t gradients = 0;
  int64_t activations = 0;  // saved for backward at the end of the forward (device)
  int64_t offloaded = 0;    // activations the plan sends to the host
  int64_t peak_allocated = 0;
  int64_t workspaces = 0;  // cuBLAS workspace inside peak_allocated (none on a CPU)
  double step_ms = 0;      // the time model's optimizer step
  double matmul_efficiency = 0;  // the time model's assumption behind step_ms
  int64_t host_offload = 0;      // host RAM the plan's offload takes (optimizer states, activations)
};

Result<Predicted> predict_categories(const planner::Plan& plan, const planner::ModelContext& context) {
  const planner::ModelStates states =
      planner::model_states(context.graph, plan.settings, plan.config, planner::Accounting::kAllocated);
  const planner::StepProfile profile =
      planner::profile_step(context.graph, context.analysis, context.compute_dtype, plan.config.micro_batch,
                            plan.seq_len, planner::Accounting::kAllocated, context.gpu);
  Predicted p;
  p.parameters = states.params;
  p.optimizer = states.optimizer + states.master;
  p.gradients = states.grads_full;
  p.activations = profile.persistent;
  for (size_t b = 0; b < profile.blocks.size() && b < plan.blocks.size(); ++b) {
    switch (plan.blocks[b]) {
      case planner::BlockChoice::kKeep: p.activations += profile.blocks[b].keep; break;
      case planner::BlockChoice::kCheckpoint: p.activations += profile.blocks[b].checkpoint; break;
      case planner::BlockChoice::kOffload: p.offloaded += profile.blocks[b].keep; break;
    }
  }
  const planner::Prediction prediction = planner::predict(context, plan.settings, plan.config, plan.blocks, false);
  p.peak_allocated = prediction.peak_allocated;
  p.workspaces = prediction.peak.workspaces;
  p.step_ms = prediction.time.step_ms;
  p.host_offload = std::max<int64_t>(0, prediction.host_ram - planner::kHostBytesPerRank * plan.settings.gpus_per_node);
  p.matmul_efficiency = context.time_options.matmul_efficiency;
  return p;
}

// The plan's per-block decision as a BlockRunner over the module's blocks.
tm::BlockRunner plan_runner(const planner::Plan& plan, OffloadStats& offload_stats,
                            const std::unordered_set<const void*>& parameters) {
  std::map<std::string, planner::BlockChoice> choices;
  for (size_t b = 0; b < plan.blocks.size(); ++b) choices[plan.block_names[b]] = plan.blocks[b];
  return [choices, &offload_stats, &parameters](const std::string& name, torch::nn::Module& block,
                                                const tm::BlockFn& fn, const std::vector<torch::Tensor>& inputs) {
    const auto found = choices.find(name);
    const planner::BlockChoice choice = found == choices.end() ? planner::BlockChoice::kKeep : found->second;
    if (choice == planner::BlockChoice::kCheckpoint) return checkpoint(fn, inputs, tm::trainable_parameters(block));
    if (choice == planner::BlockChoice::kOffload) {
      const OffloadScope scope(offload_stats, parameters);
      return fn(inputs);
    }
    return fn(inputs);
  };
}

std::string serialize_parameters(const std::vector<std::pair<std::string, torch::Tensor>>& parameters) {
  torch::serialize::OutputArchive archive;
  for (const auto& [name, tensor] : parameters) archive.write(name, tensor.detach().cpu());
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_parameters(const std::string& bytes, const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                     const std::string& origin) {
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

// fp16 dynamic loss scaling with torch.amp.GradScaler's defaults: start at
// 2^16, halve on inf/NaN gradients (skipping the step), double after 2000
// clean steps.
struct LossScaler {
  bool enabled = false;
  double scale = 65536.0;
  int64_t clean_steps = 0;
  void update(bool finite) {
    if (!enabled) return;
    if (!finite) {
      scale *= 0.5;
      clean_steps = 0;
    } else if (++clean_steps == 2000) {
      scale *= 2.0;
      clean_steps = 0;
    }
  }
};

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

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

class Trainer {
 public:
  Trainer(const planner::Plan& plan, const RunOptions& options, RunObserver& observer)
      : plan_(plan), options_(options), observer_(observer) {}

  Result<RunResult> run();

 private:
  Status setup();
  Status check_host(const planner::ModelContext& context) const;
  Status check_disk() const;
  Status resume();
  void calibrate();
  Status save(int64_t step);
  nlohmann::json identity() const { return run_identity(plan_, options_, parameters_digest(model_->module())); }
  Result<StepMetrics> train_step(int64_t step, bool measure_categories);

  const planner::Plan& plan_;
  const RunOptions& options_;
  RunObserver& observer_;
  torch::Device device_ = torch::kCPU;
  std::unique_ptr<MemoryProbe> probe_;
  // Before the model: host copies of offloaded tensors still held by a graph
  // (after a failed backward) report to these while the model is destroyed.
  std::unordered_set<const void*> parameter_storages_;
  OffloadStats offload_stats_;
  std::unique_ptr<TrainModel> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<StateStore> store_;
  tm::BlockRunner runner_;
  LossScaler scaler_;
  Predicted predicted_;
  std::map<std::string, int64_t> measured_;
  int64_t step_ = 0;  // optimizer steps done
  RunResult result_;
};

Status Trainer::setup() {
  const bool want_cuda = options_.device == "cuda" || (options_.device == "auto" && torch::cuda::is_available());
  if (want_cuda && !torch::cuda::is_available()) {
    return Status::error("--device cuda: no CUDA device is visible to LibTorch (expected a GPU, or --device cpu)");
  }
  device_ = want_cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  probe_ = std::make_unique<MemoryProbe>(device_);
  install_offload_engine();

  Result<ExecutableModel> model = executable_model(plan_.settings.model, "plan");
  if (!model.is_ok()) return model.status();
  Result<planner::ModelContext> context = planner::prepare_context(plan_.settings);
  if (!context.is_ok()) return context.status();
  // The plan's decisions must name the model's blocks, in order: a stale or
  // edited plan would otherwise run (and be measured) as another plan.
  const std::vector<graph::Block>& blocks = context->graph.blocks;
  bool same = blocks.size() == plan_.block_names.size();
  for (size_t b = 0; same && b < blocks.size(); ++b) same = blocks[b].name == plan_.block_names[b];
  if (!same) {
    return Status::error("plan: block_names: expected the " + std::to_string(blocks.size()) + " blocks of " +
                         plan_.settings.model + " in order (" + blocks.front().name + " ... " + blocks.back().name +
                         "); the plan is for another model or version, make it again");
  }
  Result<Predicted> predicted = predict_categories(plan_, context.value());
  if (!predicted.is_ok()) return predicted.status();
  predicted_ = predicted.value();
  if (Status host = check_host(context.value()); !host.is_ok()) return host;

  if (device_.is_cuda()) {
    // cuBLAS allocates its workspace through the caching allocator at the first
    // matmul of each handle (the forward thread's and autograd's device thread's),
    // and keeps it: take that now so no category below counts it.
    const auto options = torch::TensorOptions().device(device_).dtype(training_dtype(plan_.settings.precision));
    const torch::Tensor a = torch::ones({64, 64}, options.requires_grad(true));
    torch::mm(a, a).sum().backward();
  }
  torch::manual_seed(options_.seed);  // the initial weights, identical on resume
  probe_->synchronize();
  const int64_t before_model = probe_->live();
  TrainModelOptions model_options;
  model_options.device = device_;
  model_options.dtype = training_dtype(plan_.settings.precision);
  model_options.seq_len = plan_.seq_len;
  model_options.keep_logits = planner::resolve_stack(plan_.settings).top.loss.impl == planner::LossImpl::kFullKeepLogits;
  Result<std::unique_ptr<TrainModel>> built =
      make_train_model(model.value(), plan_, context->graph, options_, model_options);
  if (!built.is_ok()) return built.status();
  model_ = std::move(built.value());
  result_.notes.push_back(model_->weights_source.empty()
                              ? "weights: random initialisation (seed " + std::to_string(options_.seed) + ")"
                              : "weights: loaded from " + model_->weights_source);
  probe_->synchronize();
  const int64_t after_model = probe_->live();
  measured_["parameters"] = after_model - before_model;

  OptimizerOptions optimizer;
  optimizer.kind = plan_.settings.optimizer;
  optimizer.learning_rate = options_.learning_rate;
  optimizer.weight_decay = options_.weight_decay;
  optimizer.master_weights = planner::master_bytes_per_element(plan_.settings.precision) > 0;
  optimizer.offload_to_cpu = plan_.config.offload_optimizer == planner::Offload::kCpu;
  optimizer.cpu_threads = options_.cpu_threads;
  optimizer_ = make_optimizer(model_->trainable(), optimizer);
  probe_->synchronize();
  measured_["optimizer states + master weights"] = probe_->live() - after_model;

  scaler_.enabled = plan_.settings.precision == planner::Precision::kFp16Mixed;
  parameter_storages_ = parameter_storages(model_->module());
  runner_ = plan_runner(plan_, offload_stats_, parameter_storages_);
  if (!options_.checkpoint_dir.empty()) {
    StateStoreOptions store;
    store.directory = options_.checkpoint_dir;
    store.keep = options_.checkpoints_kept;
    store_ = std::make_unique<StateStore>(store, options_.file_system ? *options_.file_system : real_file_system());
    if (Status disk = check_disk(); !disk.is_ok()) return disk;
    if (Status writable = store_->check_writable(); !writable.is_ok()) return writable;
  }
  return Status::ok();
}

// Before anything is built (issue 14: a model larger than the machine was
// OOM-killed without a word): the module is built in fp32 on the CPU before it
// moves, a CPU run keeps everything the GPU would hold in host memory, and the
// plan's offload lives there too.
Status Trainer::check_host(const planner::ModelContext& context) const {
  const int64_t build = context.graph.parameter_count() * 4;
  const int64_t states = device_.is_cuda() ? 0 : predicted_.peak_allocated;
  const int64_t needed = build + states + predicted_.host_offload;
  int64_t available = options_.host_bytes_available;
  if (available <= 0) {
    Result<int64_t> measured = available_host_bytes();
    if (!measured.is_ok()) return Status::ok();  // no /proc/meminfo: nothing to compare against
    available = measured.value();
  }
  auto gib = [](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
    return std::string(text);
  };
  return check_host_memory(needed, available,
                           "this plan (" + gib(build) + " of fp32 weights while the model is built" +
                               (states > 0 ? ", " + gib(states) + " of model states and activations on the CPU" : "") +
                               (predicted_.host_offload > 0 ? ", " + gib(predicted_.host_offload) + " offloaded to the host"
                                                            : "") +
                               ")");
}

// Before the first step, not at the first save hours later: the disk must hold
// the checkpoints kept plus the one being written (the planner's disk rule).
Status Trainer::check_disk() const {
  FileSystem& fs = options_.file_system ? *options_.file_system : real_file_system();
  int64_t one = optimizer_->state_bytes();
  for (const auto& [name, tensor] : model_->trainable()) one += static_cast<int64_t>(tensor.nbytes());
  Result<int64_t> free = store_->free_bytes();
  if (!free.is_ok()) return free.status();
  Result<std::vector<int64_t>> present = fs.exists(options_.checkpoint_dir) ? store_->steps()
                                                                           : Result<std::vector<int64_t>>(std::vector<int64_t>{});
  // Checkpoints already there count against the budget only up to `keep`: older ones are rotated out.
  const int64_t on_disk = present.is_ok() ? static_cast<int64_t>(present.value().size()) : 0;
  const int64_t to_write = std::max<int64_t>(1, options_.checkpoints_kept + 1 - on_disk);
  const int64_t needed = to_write * one;
  if (free.value() < needed) {
    auto gib = [](int64_t bytes) {
      char text[32];
      std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
      return std::string(text);
    };
    return Status::error("--checkpoint-dir " + options_.checkpoint_dir + ": " + gib(free.value()) +
                         " free, but this run writes checkpoints of about " + gib(one) + " and needs room for " +
                         std::to_string(to_write) + " more (--keep " + std::to_string(options_.checkpoints_kept) +
                         " plus the one being written): " + gib(needed) +
                         "; nothing was trained. Free space, lower --keep, or choose another directory");
  }
  return Status::ok();
}

// On a GPU: the time model's matmul efficiency scaled by predicted / measured
// step time, and the memory outside the caching allocator (context, kernels).
void Trainer::calibrate() {
  if (!device_.is_cuda() || result_.measured.steps.size() < 2 || predicted_.step_ms <= 0) return;
  const double measured_ms = result_.measured.median_step_ms();
  if (measured_ms <= 0) return;
  planner::Calibration c;
  c.gpu = plan_.settings.gpu;
  c.matmul_efficiency = std::clamp(predicted_.matmul_efficiency * predicted_.step_ms / measured_ms, 0.01, 1.0);
  size_t free = 0;
  size_t total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    const int64_t reserved =
        stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
    c.cuda_context_bytes = static_cast<int64_t>(total - free) - reserved;
  }
  c.source = "headroom run on " + result_.measured.device + ", " + result_.measured.driver + ", torch " +
             result_.measured.torch_version + ", " + result_.measured.date;
  result_.calibration = c;
}

Status Trainer::resume() {
  StateStoreOptions options;
  options.directory = options_.resume_dir;
  const StateStore store(options, options_.file_system ? *options_.file_system : real_file_system());
  Result<std::optional<LoadedState>> loaded = store.load_latest();
  if (!loaded.is_ok()) return loaded.status();
  if (!loaded.value().has_value()) {
    return Status::error("--resume " + options_.resume_dir + ": holds no complete checkpoint to resume from");
  }
  const LoadedState& state = *loaded.value();
  for (const char* part : {"run.json", "model.pt", "optimizer.pt", "rng.pt"}) {
    if (!state.parts.count(part)) return Status::error(state.path + ": checkpoint lacks the part " + part);
  }
  const std::string origin = state.path + "/run.json";
  Result<RunState> run = parse_run_state(state.parts.at("run.json"), origin, state.step);
  if (!run.is_ok()) return run.status();
  if (Status same = check_identity(run->identity, identity(), origin); !same.is_ok()) return same;
  load_parameters(state.parts.at("model.pt"), model_->trainable(), state.path);
  optimizer_->load(state.parts.at("optimizer.pt"), state.path);
  load_rng(state.parts.at("rng.pt"), device_);
  scaler_.scale = run->loss_scale;
  scaler_.clean_steps = run->clean_steps;
  step_ = state.step;
  result_.resumed_from = state.path;
  for (const std::string& skipped : state.skipped) result_.notes.push_back("resume skipped " + skipped);
  return Status::ok();
}

Status Trainer::save(int64_t step) {
  std::map<std::string, std::string> parts;
  parts["run.json"] = run_state_text(RunState{step, identity(), scaler_.scale, scaler_.clean_steps});
  parts["model.pt"] = serialize_parameters(model_->trainable());
  parts["optimizer.pt"] = optimizer_->save();
  parts["rng.pt"] = serialize_rng(device_);
  if (Status saved = store_->save(step, parts); !saved.is_ok()) return saved;
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  const std::string path = options_.checkpoint_dir + "/" + name;
  result_.checkpoints_written.push_back(path);
  observer_.on_checkpoint(step, path);
  return Status::ok();
}

Result<StepMetrics> Trainer::train_step(int64_t step, bool measure_categories) {
  const int64_t micro = plan_.config.micro_batch;
  const int64_t accum = plan_.config.grad_accum;
  probe_->synchronize();
  probe_->reset_peak();
  const auto start = Clock::now();
  double loss_sum = 0;
  for (int64_t m = 0; m < accum; ++m) {
    const int64_t first = ((step - 1) * accum + m) * micro;
    const int64_t before_forward = probe_->live();
    const int64_t host_before = offload_stats_.host_live_bytes;
    Result<torch::Tensor> loss = model_->loss(first, micro, runner_);
    if (!loss.is_ok()) return loss.status();
    if (measure_categories && m == 0) {
      probe_->synchronize();
      // On the CPU the offloaded copies live in the same memory; the device's share excludes them.
      const int64_t host = device_.is_cuda() ? 0 : offload_stats_.host_live_bytes - host_before;
      measured_["activations"] = probe_->live() - before_forward - host;
      measured_["offloaded activations"] = offload_stats_.host_live_bytes - host_before;
    }
    loss_sum += loss.value().detach().to(torch::kDouble).item<double>();
    torch::Tensor scaled = loss.value() / static_cast<double>(accum);
    if (scaler_.enabled) scaled = scaled * scaler_.scale;
    scaled.backward();
    model_->release_outputs();
  }
  const bool finite = optimizer_->step(scaler_.enabled ? 1.0 / scaler_.scale : 1.0, scaler_.enabled);
  scaler_.update(finite);
  // The gradients are what dropping them frees (first-use caches of autograd
  // and the kernels stay out of the figure).
  probe_->synchronize();
  const int64_t with_grads = probe_->live();
  optimizer_->zero_grad();
  if (measure_categories) {
    probe_->synchronize();
    measured_["gradients"] = with_grads - probe_->live();
  }
  probe_->synchronize();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();

  StepMetrics metrics;
  metrics.step = step;
  metrics.total_steps = options_.steps;
  metrics.loss = loss_sum / static_cast<double>(accum);
  metrics.step_ms = ms;
  metrics.tokens_per_s = static_cast<double>(micro * accum * model_->tokens_per_sample()) / (ms / 1000.0);
  metrics.peak_allocated = probe_->peak_allocated();
  metrics.peak_reserved = probe_->peak_reserved();
  metrics.loss_scale = scaler_.scale;
  metrics.skipped = !finite;
  if (!std::isfinite(metrics.loss)) {
    return Status::error("step " + std::to_string(step) + ": the loss is " + std::to_string(metrics.loss) +
                         " (training diverged; try a lower --lr)");
  }
  return metrics;
}

Result<RunResult> Trainer::run() {
  if (Status s = check_executable(plan_, "plan"); !s.is_ok()) return s;
  if (Status s = validate_run_options(options_, "command line"); !s.is_ok()) return s;
  if (Status s = setup(); !s.is_ok()) return s;
  if (!options_.resume_dir.empty()) {
    if (Status s = resume(); !s.is_ok()) return s;
  }
  if (step_ >= options_.steps) {
    return Status::error("--steps " + std::to_string(options_.steps) + ": the checkpoint in " + options_.resume_dir +
                         " is already at step " + std::to_string(step_) + "; expected more steps than that to train");
  }
  result_.first_step = step_ + 1;
  result_.measured.device = device_.is_cuda() ? at::cuda::getDeviceProperties(device_.index())->name : "cpu";
  result_.measured.torch_version = TORCH_VERSION;
  result_.measured.date = today();
  if (device_.is_cuda()) {
    int driver = 0;
    cudaDriverGetVersion(&driver);
    result_.measured.driver = "CUDA driver API " + std::to_string(driver / 1000) + "." +
                              std::to_string((driver % 1000) / 10);
  }
  observer_.on_start(result_.measured.device, result_.first_step, options_.steps);
  const bool fresh = step_ == 0;
  while (step_ < options_.steps) {
    Result<StepMetrics> metrics = train_step(step_ + 1, /*measure_categories=*/fresh && step_ == 0);
    if (!metrics.is_ok()) return metrics.status();
    ++step_;
    result_.measured.steps.push_back(planner::MeasuredStep{static_cast<int>(step_), metrics->peak_allocated,
                                                           metrics->peak_reserved, metrics->step_ms, metrics->loss});
    if (Status observed = observer_.on_step(metrics.value()); !observed.is_ok()) {
      return Status::error("step " + std::to_string(step_) + ": " + observed.message() + "; the run stops" +
                           (result_.checkpoints_written.empty() ? "" : " (checkpoints written so far stay)"));
    }
    const bool periodic = options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0;
    if (store_ && (periodic || step_ == options_.steps)) {
      if (Status s = save(step_); !s.is_ok()) {
        return Status::error("step " + std::to_string(step_) + ": checkpoint not saved, the run stops: " + s.message());
      }
    }
  }
  result_.last_step = step_;
  calibrate();

  if (fresh && result_.first_step <= result_.last_step) {
    const bool host_optimizer = plan_.config.offload_optimizer != planner::Offload::kNone;
    auto add = [&](const std::string& name, int64_t predicted) {
      result_.categories.push_back(CategoryCheck{name, predicted, measured_[name]});
    };
    add("parameters", predicted_.parameters);
    if (host_optimizer && !device_.is_cuda()) {
      result_.notes.push_back("optimizer offload on a CPU run: the states are in the same memory as everything "
                              "else, so gradients and optimizer states are not compared");
    } else {
      add("optimizer states + master weights", predicted_.optimizer);
      add("gradients", predicted_.gradients);
    }
    add("activations", predicted_.activations);
    if (predicted_.offloaded > 0) add("offloaded activations", predicted_.offloaded);
    if (device_.is_cuda()) {
      result_.categories.push_back(CategoryCheck{"peak allocated (step 1)", predicted_.peak_allocated,
                                                 result_.measured.steps.front().peak_allocated});
    } else {
      result_.categories.push_back(CategoryCheck{"peak allocated less cuBLAS workspace (step 1)",
                                                 predicted_.peak_allocated - predicted_.workspaces,
                                                 result_.measured.steps.front().peak_allocated});
      result_.notes.push_back("CPU run: CPU kernels' temporaries differ from CUDA's, so the peak is indicative; "
                              "the per-category rows are the check");
    }
  } else if (!fresh) {
    result_.notes.push_back("resumed run: memory categories are measured on a fresh run's first step only");
  }
  return result_;
}

}  // namespace

bool executor_available() { return true; }
bool cuda_available() { return torch::cuda::is_available(); }

Result<RunResult> train_plan(const planner::Plan& plan, const RunOptions& options, RunObserver& observer) {
  // LibTorch reports failures as exceptions; they end here as one message.
  try {
    RunOptions resolved = options;
    // A resumed run goes on writing checkpoints where it resumed from.
    if (resolved.checkpoint_dir.empty()) resolved.checkpoint_dir = resolved.resume_dir;
    Trainer trainer(plan, resolved, observer);
    return trainer.run();
  } catch (const c10::Error& e) {
    return Status::error("LibTorch: " + std::string(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
}

}  // namespace headroom::executor
