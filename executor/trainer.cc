// train_plan(): the training loop. It trains a Plan with LibTorch as the
// planner's step: grad_accum micro-batches of micro_batch samples, each block
// kept, checkpointed or offloaded as the plan says, then one step of the
// plan's optimizer (executor/optimizer.h; AdamW on the CPU when the plan
// offloads the optimizer). Memory is read through the MemoryProbe at the
// points where the planner's categories can be told apart, and checked against
// the plan (executor/prediction_check.h); training-state checkpoints are
// written and resumed through executor/training_state.h.
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/accumulate.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <map>

#include "executor/checkpoint.h"
#include "executor/communicator.h"
#include "executor/crc32c.h"
#include "executor/executable_model.h"
#include "executor/gloo_communicator.h"
#include "executor/gradient_all_reduce.h"
#include "executor/host_memory.h"
#include "executor/memory_probe.h"
#include "executor/nccl_communicator.h"
#include "executor/offload.h"
#include "executor/optimizer.h"
#include "executor/prediction_check.h"
#include "executor/run.h"
#include "executor/state_store.h"
#include "executor/status_error.h"
#include "executor/train_model.h"
#include "executor/training_state.h"
#include "executor/zero3_parameters.h"
#include "planner/memory/model_states.h"
#include "planner/predict/plan_file.h"
#include "planner/settings/stack.h"

namespace headroom::executor {
namespace {

namespace tm = models::torch_modules;
using Clock = std::chrono::steady_clock;

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

// The plan's per-block decision as a BlockRunner over the module's blocks
// (the embeddings and the head, which the models run through it too, plainly).
tm::BlockRunner plan_runner(const planner::Plan& plan, const graph::LayerGraph& graph, OffloadStats& offload_stats,
                            const std::unordered_set<const void*>& parameters) {
  std::map<std::string, planner::BlockChoice> choices;
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    if (graph.blocks[b].checkpointable) choices[plan.block_names[b]] = plan.blocks[b];
  }
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

// Several ranks: each step's random stream (dropout) is the rank's own and
// depends only on (seed, rank, step), so a resume on any step continues it
// exactly without saving every rank's generator.
uint64_t step_seed(uint64_t seed, int rank, int64_t step) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(rank) + 1)) ^
               (0xbf58476d1ce4e5b9ULL * static_cast<uint64_t>(step));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

class Trainer {
 public:
  // `prepared`: the plan with its prediction made again for its decisions, and the model it is for.
  Trainer(const planner::PreparedPlan& prepared, const RunOptions& options, RunObserver& observer)
      : plan_(prepared.plan), context_(prepared.context), options_(options), observer_(observer) {}

  Result<RunResult> run();

 private:
  Status setup();
  Status build_model(const ExecutableModel& model, const graph::LayerGraph& graph);
  Status open_store();
  Status open_leader_store();
  Status resume();
  Status save(int64_t step);
  Result<std::vector<int64_t>> proposals(int64_t proposed);
  FileSystem& file_system() const { return options_.file_system ? *options_.file_system : real_file_system(); }
  TrainingState state() {
    return TrainingState{*model_, *optimizer_, scaler_, device_, zero3_.get(), rank(), world()};
  }
  // Computed before ZeRO-3 empties the parameters, whose shapes it digests.
  const nlohmann::json& identity() const { return identity_; }
  Result<StepMetrics> train_step(int64_t step, bool measure_categories);
  void describe_device();
  Status join_job(bool on_cuda);
  // The job goes on only if every rank's `local` is ok; a rank that failed
  // keeps its own message, the others learn which rank stopped the job.
  Status agree(const Status& local, const std::string& what);
  Status gather_category_checks();
  int world() const { return comm_->world_size(); }
  int rank() const { return comm_->rank(); }
  bool leader() const { return comm_->rank() == 0; }

  const planner::Plan& plan_;  // its prediction is what the run is checked against
  const planner::ModelContext& context_;
  const RunOptions& options_;
  RunObserver& observer_;
  torch::Device device_ = torch::kCPU;
  int local_device_ = 0;  // the CUDA device of this rank (LOCAL_RANK in a job of several)
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<MemoryProbe> probe_;
  // Before the model: host copies of offloaded tensors still held by a graph
  // (after a failed backward) report to these while the model is destroyed.
  std::unordered_set<const void*> parameter_storages_;
  OffloadStats offload_stats_;
  std::unique_ptr<TrainModel> model_;
  nlohmann::json identity_;
  std::unique_ptr<Zero3Parameters> zero3_;  // ZeRO-3's partitioned parameters; null at stages 0-2
  int64_t gathered_peak_ = 0;                // ZeRO-3: most gathered at once over the first step
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<StateStore> store_;
  tm::BlockRunner runner_;
  LossScaler scaler_;
  MeasuredCategories measured_;
  int64_t step_ = 0;  // optimizer steps done
  RunResult result_;
};

// The ranks of the job meet (torchrun's environment; none: one process) and
// check that they all run the plan with the same options.
Status Trainer::join_job(bool on_cuda) {
  Result<Rendezvous> meet = rendezvous_from_environment();
  if (!meet.is_ok()) return meet.status();
  meet->timeout = std::chrono::seconds(options_.comm_timeout_s);
  if (meet->world_size == 1) {
    comm_ = single_process_communicator();
  } else {
    // GPUs meet in NCCL's group, each rank on its machine's LOCAL_RANK device; CPUs in Gloo's.
    Result<std::unique_ptr<Communicator>> joined =
        on_cuda ? connect_nccl(meet.value(), meet->local_rank) : connect_gloo(meet.value());
    if (!joined.is_ok()) return joined.status();
    comm_ = std::move(joined.value());
    if (on_cuda) local_device_ = meet->local_rank;
  }
  const int planned = plan_.settings.world_size();
  if (world() != planned) {
    return Status::invalid_input(
        "plan: settings.gpus_per_node x settings.nodes: the plan is for " +
        std::to_string(planned) + " ranks, but this job has " + std::to_string(world()) +
        (world() == 1 ? " (no RANK / WORLD_SIZE in the environment)" : " (WORLD_SIZE)") +
        "; start it with `headroom run PLAN --nproc " + std::to_string(planned) +
        "` or `torchrun --nproc-per-node " + std::to_string(planned) +
        " --no-python headroom-train run PLAN`");
  }
  if (world() == 1) return Status::ok();
  // Every rank must train the same plan with the same options: a digest of
  // both, compared with rank 0's.
  const std::string mine = planner::plan_to_json(plan_).dump() + "|" + std::to_string(options_.steps) + "|" +
                           options_.data + "|" + std::to_string(options_.token_bytes) + "|" +
                           std::to_string(options_.learning_rate) + "|" + std::to_string(options_.weight_decay) +
                           "|" + std::to_string(options_.seed) + "|" + options_.device + "|" + options_.resume_dir;
  const torch::Tensor digest = torch::full({1}, static_cast<int64_t>(crc32c(mine)), torch::kLong);
  torch::Tensor all = torch::empty({world()}, torch::kLong);
  if (Status s = comm_->all_gather(digest, all); !s.is_ok()) return s;
  for (int r = 1; r < world(); ++r) {
    if (all[r].item<int64_t>() != all[0].item<int64_t>()) {
      return Status::invalid_input(
          "rank " + std::to_string(r) +
          " runs another plan or other options than rank 0 (digests differ); every rank must be "
          "started with the same plan file and flags");
    }
  }
  return Status::ok();
}

Status Trainer::agree(const Status& local, const std::string& what) {
  if (world() == 1) return local;
  // Each rank's error code (0: ok): a rank that did not fail stops with the
  // code of the first that did, so the job's exit status (cli/exit_status.h)
  // does not depend on which rank the launcher sees end first.
  torch::Tensor failed = torch::zeros({world()}, torch::kFloat);
  failed[rank()] = static_cast<float>(local.code());
  if (Status s = comm_->all_reduce_sum(failed); !s.is_ok()) return s;
  if (!local.is_ok()) return local;
  for (int r = 0; r < world(); ++r) {
    const auto code = static_cast<StatusCode>(static_cast<int>(failed[r].item<float>()));
    if (code == StatusCode::kOk) continue;
    return Status::with_code(code, what + ": rank " + std::to_string(r) +
                                       " failed (its message says why); the job stops");
  }
  return Status::ok();
}

Status Trainer::setup() {
  const bool want_cuda = options_.device == "cuda" || (options_.device == "auto" && torch::cuda::is_available());
  if (want_cuda && !torch::cuda::is_available()) {
    return Status::unsupported(
        "--device cuda: no CUDA device is visible to LibTorch (expected a GPU, or --device cpu)");
  }
  if (Status s = join_job(want_cuda); !s.is_ok()) return s;
  device_ = want_cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_device_))
                      : torch::Device(torch::kCPU);
  probe_ = std::make_unique<MemoryProbe>(device_);
  install_offload_engine();

  Result<ExecutableModel> model = executable_model(plan_.settings.model, "plan");
  if (!model.is_ok()) return model.status();
  // The plan's decisions must name the model's blocks, in order: a stale or
  // edited plan would otherwise run (and be measured) as another plan.
  const std::vector<graph::Block>& blocks = context_.graph.blocks;
  bool same = blocks.size() == plan_.block_names.size();
  for (size_t b = 0; same && b < blocks.size(); ++b) same = blocks[b].name == plan_.block_names[b];
  if (!same) {
    return Status::invalid_input(
        "plan: block_names: expected the " + std::to_string(blocks.size()) + " blocks of " +
        plan_.settings.model + " in order (" + blocks.front().name + " ... " + blocks.back().name +
        "); the plan is for another model or version, make it again");
  }
  // Before anything is built (issue 14: a model larger than the machine was
  // OOM-killed without a word): the module is built in fp32 on the CPU before
  // it moves, a CPU run keeps everything the GPU would hold in host memory, and
  // the plan's offload lives there too.
  const RunHostNeed host{context_.graph.parameter_count() * 4,
                         device_.is_cuda() ? 0 : plan_.prediction.peak_allocated, predicted_host_offload(plan_)};
  if (Status s = check_run_host_memory(host, options_.host_bytes_available); !s.is_ok()) return s;

  probe_->claim_cublas_workspaces(training_dtype(plan_.settings.precision));
  torch::manual_seed(options_.seed);  // the initial weights, identical on resume
  if (Status s = build_model(model.value(), context_.graph); !s.is_ok()) return s;
  scaler_.enabled = plan_.settings.precision == planner::Precision::kFp16Mixed;
  parameter_storages_ = parameter_storages(model_->module());
  runner_ = plan_runner(plan_, context_.graph, offload_stats_, parameter_storages_);
  if (zero3_) runner_ = zero3_->runner(runner_);
  return open_store();
}

// The module and then the optimizer, measuring what each adds.
Status Trainer::build_model(const ExecutableModel& model, const graph::LayerGraph& graph) {
  probe_->synchronize();
  const int64_t before_model = probe_->live();
  TrainModelOptions model_options;
  model_options.device = device_;
  model_options.dtype = training_dtype(plan_.settings.precision);
  model_options.seq_len = plan_.seq_len;
  model_options.keep_logits = planner::resolve_stack(plan_.settings).top.loss.impl == planner::LossImpl::kFullKeepLogits;
  Result<std::unique_ptr<TrainModel>> built = make_train_model(model, plan_, graph, options_, model_options);
  if (!built.is_ok()) return built.status();
  model_ = std::move(built.value());
  identity_ = training_identity(plan_, options_, *model_);
  if (plan_.config.zero_stage == 3) zero3_ = partition_parameters(model_->module(), graph, plan_, *comm_);
  result_.notes.push_back(model_->weights_source.empty()
                              ? "weights: random initialisation (seed " + std::to_string(options_.seed) + ")"
                              : "weights: loaded from " + model_->weights_source);
  probe_->synchronize();
  const int64_t after_model = probe_->live();
  measured_.parameters = after_model - before_model;

  OptimizerOptions optimizer;
  optimizer.kind = plan_.settings.optimizer;
  optimizer.learning_rate = options_.learning_rate;
  optimizer.weight_decay = options_.weight_decay;
  optimizer.master_weights = planner::master_bytes_per_element(plan_.settings.precision) > 0;
  optimizer.offload_to_cpu = plan_.config.offload_optimizer == planner::Offload::kCpu;
  optimizer.cpu_threads = options_.cpu_threads;
  optimizer.communicator = comm_.get();
  optimizer.zero_stage = plan_.config.zero_stage;
  optimizer.reduce_bucket_elements = plan_.settings.reduce_bucket_elements;
  if (zero3_) {
    for (const auto& [name, tensor] : model_->trainable()) optimizer.partitioned.push_back(zero3_->partition_of(tensor));
  }
  optimizer_ = make_optimizer(model_->trainable(), optimizer);
  probe_->synchronize();
  measured_.optimizer = probe_->live() - after_model;
  return Status::ok();
}

// The checkpoint directory, when the run writes one: room for the checkpoints
// kept and writable, both before the first step.
Status Trainer::open_store() {
  if (options_.checkpoint_dir.empty()) return Status::ok();
  // Rank 0 checks the room for the whole checkpoint; with a partitioned
  // optimizer every rank writes its own part, so every rank checks that it
  // can write there (a rank on a machine that does not see the directory).
  Status opened = Status::ok();
  if (leader()) {
    opened = open_leader_store();
  } else if (optimizer_->partitioned()) {
    StateStoreOptions store;
    store.directory = options_.checkpoint_dir;
    store.keep = options_.checkpoints_kept;
    store_ = std::make_unique<StateStore>(store, file_system());
    opened = store_->check_writable();
  }
  return agree(opened, "--checkpoint-dir " + options_.checkpoint_dir);
}

Status Trainer::open_leader_store() {
  StateStoreOptions store;
  store.directory = options_.checkpoint_dir;
  store.keep = options_.checkpoints_kept;
  store_ = std::make_unique<StateStore>(store, file_system());
  int64_t checkpoint_bytes = optimizer_->checkpoint_bytes();
  for (const auto& [name, tensor] : model_->trainable()) {
    const std::vector<int64_t> shape = zero3_ ? zero3_->partition_of(tensor).shape : tensor.sizes().vec();
    checkpoint_bytes += c10::multiply_integers(shape) * static_cast<int64_t>(tensor.element_size());
  }
  if (Status room = check_checkpoint_room(*store_, file_system(), options_, checkpoint_bytes); !room.is_ok()) {
    return room;
  }
  return store_->check_writable();
}

// Each rank proposes the newest checkpoint it can read and learns every proposal.
Result<std::vector<int64_t>> Trainer::proposals(int64_t proposed) {
  if (world() == 1) return std::vector<int64_t>{proposed};
  torch::Tensor all = torch::empty({world()}, torch::kLong);
  if (Status s = comm_->all_gather(torch::full({1}, proposed, torch::kLong), all); !s.is_ok()) return s;
  return std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + world());
}

Status Trainer::resume() {
  Result<Resumed> resumed = resume_training(options_.resume_dir, file_system(), identity(), state(),
                                            [this](int64_t proposed) { return proposals(proposed); });
  if (!resumed.is_ok()) return resumed.status();
  step_ = resumed->step;
  result_.resumed_from = resumed->path;
  for (const std::string& skipped : resumed->skipped) result_.notes.push_back("resume skipped " + skipped);
  return Status::ok();
}

Status Trainer::save(int64_t step) {
  if (optimizer_->partitioned()) {
    // Every rank writes its own partition; nothing is gathered.
    const auto agree_on = [this](const Status& local, const std::string& what) { return agree(local, what); };
    if (Status s = save_sharded_checkpoint(step, checkpoint_parts(step, identity(), state()), state(), *store_, *comm_,
                                           agree_on);
        !s.is_ok()) {
      return s;
    }
  } else {
    // Every rank holds the whole state: rank 0 writes it.
    Status saved = leader() ? store_->save(step, checkpoint_parts(step, identity(), state())) : Status::ok();
    if (Status s = agree(saved, "checkpoint of step " + std::to_string(step)); !s.is_ok()) return s;
  }
  const std::string path = checkpoint_path(options_.checkpoint_dir, step);
  result_.checkpoints_written.push_back(path);
  if (leader()) observer_.on_checkpoint(step, path);
  return Status::ok();
}

Result<StepMetrics> Trainer::train_step(int64_t step, bool measure_categories) {
  const int64_t micro = plan_.config.micro_batch;
  const int64_t accum = plan_.config.grad_accum;
  probe_->synchronize();
  probe_->reset_peak();
  if (zero3_) zero3_->reset_peak();
  if (world() > 1) torch::manual_seed(step_seed(options_.seed, rank(), step));
  const auto start = Clock::now();
  double loss_sum = 0;
  for (int64_t m = 0; m < accum; ++m) {
    // Rank r reads the r-th contiguous slice of the step's global batch, so the
    // job sees the samples one process would in accum x world micro-steps.
    const int64_t first = (((step - 1) * world() + rank()) * accum + m) * micro;
    const int64_t before_forward = probe_->live();
    const int64_t host_before = offload_stats_.host_live_bytes;
    Result<torch::Tensor> loss = model_->loss(first, micro, runner_);
    if (!loss.is_ok()) return loss.status();
    if (measure_categories && m == 0) {
      probe_->synchronize();
      // On the CPU the offloaded copies live in the same memory; the device's share excludes them.
      const int64_t host = device_.is_cuda() ? 0 : offload_stats_.host_live_bytes - host_before;
      measured_.activations = probe_->live() - before_forward - host;
      measured_.offloaded_activations = offload_stats_.host_live_bytes - host_before;
    }
    loss_sum += loss.value().detach().to(torch::kDouble).item<double>();
    torch::Tensor scaled = loss.value() / static_cast<double>(accum);
    if (scaler_.enabled) scaled = scaled * scaler_.scale;
    scaled.backward();
    if (zero3_) zero3_->backward_done();
    model_->release_outputs();
    optimizer_->backward_done();
  }
  double grad_scale = scaler_.enabled ? 1.0 / scaler_.scale : 1.0;
  if (world() > 1 && plan_.config.zero_stage == 0) {
    // Plain data parallelism: sum the whole gradients, the optimizer takes the mean.
    if (Status s = all_reduce_gradients(model_->trainable(), *comm_, plan_.settings.reduce_bucket_elements);
        !s.is_ok()) {
      return s;
    }
    grad_scale /= world();
  }
  if (world() > 1) {
    torch::Tensor sum = torch::full({1}, loss_sum, torch::kDouble);
    if (Status s = comm_->all_reduce_sum(sum); !s.is_ok())
      return s.with_prefix("all-reduce of the loss: ");
    loss_sum = sum.item<double>() / world();
  }
  const bool finite = optimizer_->step(grad_scale, scaler_.enabled);
  scaler_.update(finite);
  // The gradients are what dropping them frees (first-use caches of autograd
  // and the kernels stay out of the figure).
  probe_->synchronize();
  const int64_t with_grads = probe_->live();
  optimizer_->zero_grad();
  if (measure_categories) {
    probe_->synchronize();
    measured_.gradients = with_grads - probe_->live();
    if (zero3_) gathered_peak_ = zero3_->stats().peak_live_bytes;  // before a checkpoint gathers everything
  }
  probe_->synchronize();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();

  StepMetrics metrics;
  metrics.step = step;
  metrics.total_steps = options_.steps;
  metrics.loss = loss_sum / static_cast<double>(accum);
  metrics.step_ms = ms;
  metrics.tokens_per_s = static_cast<double>(micro * accum * world() * model_->tokens_per_sample()) / (ms / 1000.0);
  metrics.peak_allocated = probe_->peak_allocated();
  metrics.peak_reserved = probe_->peak_reserved();
  metrics.loss_scale = scaler_.scale;
  metrics.skipped = !finite;
  if (!std::isfinite(metrics.loss)) {
    return Status::runtime("step " + std::to_string(step) + ": the loss is " +
                           std::to_string(metrics.loss) + " (training diverged; try a lower --lr)");
  }
  return metrics;
}

void Trainer::describe_device() {
  result_.measured.device = device_.is_cuda() ? at::cuda::getDeviceProperties(device_.index())->name : "cpu";
  result_.measured.torch_version = TORCH_VERSION;
  result_.measured.date = today();
  if (device_.is_cuda()) {
    int driver = 0;
    cudaDriverGetVersion(&driver);
    result_.measured.driver = "CUDA driver API " + std::to_string(driver / 1000) + "." +
                              std::to_string((driver % 1000) / 10);
  }
}

// Several ranks: each category's row shows the rank whose measurement is
// furthest from the (per-rank) prediction, so every rank is within it.
Status Trainer::gather_category_checks() {
  if (world() == 1) return Status::ok();
  const auto rows = static_cast<int64_t>(result_.categories.size());
  torch::Tensor mine = torch::empty({rows}, torch::kLong);
  for (int64_t i = 0; i < rows; ++i) mine[i] = result_.categories[static_cast<size_t>(i)].measured;
  torch::Tensor all = torch::empty({rows * world()}, torch::kLong);
  if (Status s = comm_->all_gather(mine, all); !s.is_ok())
    return s.with_prefix("all-gather of measurements: ");
  for (int64_t i = 0; i < rows; ++i) {
    CategoryCheck& row = result_.categories[static_cast<size_t>(i)];
    CategoryCheck worst = row;
    worst.rank = 0;
    for (int r = 0; r < world(); ++r) {
      CategoryCheck candidate = row;
      candidate.measured = all[r * rows + i].item<int64_t>();
      candidate.rank = r;
      if (r == 0 || std::abs(candidate.relative_error()) > std::abs(worst.relative_error())) worst = candidate;
    }
    row = worst;
  }
  result_.notes.push_back("several ranks: each memory row is the rank furthest from the per-rank prediction");
  return Status::ok();
}

Result<RunResult> Trainer::run() {
  if (Status s = setup(); !s.is_ok()) return s;
  if (!options_.resume_dir.empty()) {
    if (Status s = resume(); !s.is_ok()) return s;
  }
  if (step_ >= options_.steps) {
    return Status::invalid_input("--steps " + std::to_string(options_.steps) +
                                 ": the checkpoint in " + options_.resume_dir +
                                 " is already at step " + std::to_string(step_) +
                                 "; expected more steps than that to train");
  }
  result_.first_step = step_ + 1;
  describe_device();
  result_.rank = rank();
  result_.world_size = world();
  if (leader()) observer_.on_start(result_.measured.device, result_.first_step, options_.steps);
  const bool fresh = step_ == 0;
  while (step_ < options_.steps) {
    Result<StepMetrics> metrics = train_step(step_ + 1, /*measure_categories=*/fresh && step_ == 0);
    if (!metrics.is_ok()) return metrics.status();
    ++step_;
    if (world() > 1) {
      // Every rank's peaks for the metrics file: the ranks differ (rank 0
      // owns the buckets' first chunks, ZeRO-3 gathers unevenly sized blocks).
      const torch::Tensor mine = torch::tensor({metrics->peak_allocated, metrics->peak_reserved}, torch::kLong);
      torch::Tensor all = torch::empty({2 * world()}, torch::kLong);
      if (Status s = comm_->all_gather(mine, all); !s.is_ok()) return s;
      for (int r = 0; r < world(); ++r) {
        metrics->ranks.push_back({all[2 * r].item<int64_t>(), all[2 * r + 1].item<int64_t>()});
      }
    }
    result_.measured.steps.push_back(planner::MeasuredStep{static_cast<int>(step_), metrics->peak_allocated,
                                                           metrics->peak_reserved, metrics->step_ms, metrics->loss});
    Status observed = leader() ? observer_.on_step(metrics.value()) : Status::ok();
    if (world() > 1) observed = agree(observed, "progress");
    if (!observed.is_ok()) {
      return observed.with_prefix("step " + std::to_string(step_) + ": ")
          .with_suffix(
              std::string("; the run stops") +
              (result_.checkpoints_written.empty() ? "" : " (checkpoints written so far stay)"));
    }
    const bool periodic = options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0;
    if (!options_.checkpoint_dir.empty() && (periodic || step_ == options_.steps)) {
      if (Status s = save(step_); !s.is_ok()) {
        return s.with_prefix("step " + std::to_string(step_) +
                             ": checkpoint not saved, the run stops: ");
      }
    }
  }
  result_.last_step = step_;
  if (device_.is_cuda()) {
    result_.calibration = calibrate(plan_, context_.time_options.matmul_efficiency, result_.measured,
                                    probe_->outside_allocator_bytes());
  }
  if (fresh && result_.first_step <= result_.last_step) {
    add_category_checks(plan_, measured_, device_.is_cuda(), result_);
    if (zero3_) add_gathered_check(plan_, context_.graph, gathered_peak_, result_);
    if (Status s = gather_category_checks(); !s.is_ok()) return s;
  } else if (!fresh) {
    result_.notes.push_back("resumed run: memory categories are measured on a fresh run's first step only");
  }
  return result_;
}

}  // namespace

// "rank 2 of 4: " in a job of several ranks, so each rank's message says whose it is.
static std::string rank_prefix() {
  Result<Rendezvous> meet = rendezvous_from_environment();
  if (!meet.is_ok() || meet->world_size == 1) return {};
  return "rank " + std::to_string(meet->rank) + " of " + std::to_string(meet->world_size) + ": ";
}

bool executor_available() { return true; }
bool cuda_available() { return torch::cuda::is_available(); }

Result<RunResult> train_plan(const planner::Plan& given, const RunOptions& options, RunObserver& observer) {
  // LibTorch reports failures as exceptions; they end here as one message.
  try {
    const planner::Plan plan = as_executor_runs(given);
    if (Status s = check_executable(plan, "plan"); !s.is_ok()) return s;
    if (Status s = validate_run_options(options, "command line"); !s.is_ok()) return s;
    // The prediction the run is checked against is the plan's, made again for
    // its decisions by the planner's plan loader (a plan file does not carry
    // it; a caller may have changed the decisions).
    Result<planner::PreparedPlan> prepared = planner::prepare_plan(plan, "plan");
    if (!prepared.is_ok()) return prepared.status();
    RunOptions resolved = options;
    // A resumed run goes on writing checkpoints where it resumed from.
    if (resolved.checkpoint_dir.empty()) resolved.checkpoint_dir = resolved.resume_dir;
    Trainer trainer(prepared.value(), resolved, observer);
    Result<RunResult> result = trainer.run();
    if (!result.is_ok()) return result.status().with_prefix(rank_prefix());
    return result;
  } catch (const StatusError& e) {
    return e.status().with_prefix(rank_prefix());
  } catch (const c10::Error& e) {
    // Out of memory among others: a failure of this run, not of its input.
    return Status::runtime(rank_prefix() + "LibTorch: " + std::string(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status::internal(rank_prefix() + e.what());
  }
}

}  // namespace headroom::executor
