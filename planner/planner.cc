#include "planner/planner.h"

#include <algorithm>
#include <cmath>

#include "graph/graph_json.h"
#include "models/hf_import.h"
#include "models/zoo.h"
#include "planner/allocator_rounding.h"
#include "planner/block_solver.h"
#include "planner/calibration.h"
#include "planner/simulator.h"
#include "planner/step_builder.h"
#include "planner/step_time.h"
#include "planner/trainability.h"

namespace headroom::planner {
namespace {

// Host memory of one training process before any offload: the Python
// interpreter, torch and the CUDA libraries mapped in, the data loader. An
// assumption (docs/memory-model.md, "Host RAM") until the executor measures it.
constexpr int64_t kHostBytesPerRank = 3LL << 30;

bool looks_like_path(const std::string& model) {
  return model.find('/') != std::string::npos || model.ends_with(".json");
}

graph::DType compute_dtype_for(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return graph::DType::kF32;
    case Precision::kFp16Mixed: return graph::DType::kF16;
    case Precision::kBf16Mixed:
    case Precision::kBf16Pure: return graph::DType::kBF16;
  }
  return graph::DType::kBF16;
}

Result<int64_t> resolve_seq_len(const graph::LayerGraph& graph, const RunSettings& settings) {
  const graph::SequenceSpec& spec = graph.sequence;
  int64_t seq = spec.default_seq;
  if (settings.resolution > 0) {
    if (spec.unit != "image") {
      return Status::error("resolution: " + graph.name + " takes a sequence length (--seq), not an image resolution");
    }
    if (settings.resolution % spec.patch_px != 0) {
      return Status::error("resolution: expected a multiple of the patch size " + std::to_string(spec.patch_px) +
                           " px for " + graph.name + ", got " + std::to_string(settings.resolution));
    }
    const int64_t side = settings.resolution / spec.patch_px;
    seq = spec.images * side * side + spec.extra_tokens;
  } else if (settings.seq_len > 0) {
    seq = settings.seq_len;
  }
  if (seq > spec.max_seq) {
    return Status::error("seq_len: " + std::to_string(seq) + " tokens exceed the maximum of " + graph.name +
                         " (" + std::to_string(spec.max_seq) + ")");
  }
  return seq;
}

}  // namespace

int64_t context_bytes(const ModelContext& context, const RunSettings& settings) {
  if (settings.cuda_context_bytes) return *settings.cuda_context_bytes;
  return context.measured_context_bytes.value_or(context.gpu.cuda_context_bytes);
}

int64_t gpu_budget_bytes(const ModelContext& context, const RunSettings& settings) {
  const double capacity = static_cast<double>(context.gpu.memory_bytes);
  return static_cast<int64_t>(std::floor(capacity * (1.0 - settings.safety_margin)));
}

int64_t allocator_budget(const ModelContext& context, const RunSettings& settings) {
  return gpu_budget_bytes(context, settings) - context_bytes(context, settings);
}

Result<ModelContext> prepare_context(const RunSettings& settings) {
  const Status valid = validate_settings(settings, "settings");
  if (!valid.is_ok()) return valid;
  ModelContext context;
  Result<graph::LayerGraph> loaded = [&]() -> Result<graph::LayerGraph> {
    models::ZooOptions options;
    options.attention = settings.attention;
    options.dropout = settings.dropout;
    options.precomputed_text_embeddings = settings.precomputed_text_embeddings;
    if (looks_like_path(settings.model) && models::is_hf_model_path(settings.model)) {
      Result<models::HfModel> model = models::load_hf_model(settings.model, options);
      if (!model.is_ok()) return model.status();
      context.checkpoint_mismatches = model->mismatches;
      return std::move(model->graph);
    }
    if (looks_like_path(settings.model)) return graph::load_graph_file(settings.model);
    return models::build_zoo_model(settings.model, options);
  }();
  if (!loaded.is_ok()) return loaded.status();
  Result<graph::LayerGraph> trained = apply_training_mode(loaded.value(), settings);
  if (!trained.is_ok()) return trained.status();
  context.graph = std::move(trained.value());
  context.analysis = graph::analyze_graph(context.graph);

  Result<GpuSpec> gpu = find_gpu(settings.gpu);
  if (!gpu.is_ok()) return gpu.status();
  context.gpu = settings.gpu_memory_bytes ? with_memory(gpu.value(), *settings.gpu_memory_bytes) : gpu.value();
  const Result<int64_t> seq = resolve_seq_len(context.graph, settings);
  if (!seq.is_ok()) return seq.status();
  context.seq_len = seq.value();
  context.compute_dtype = compute_dtype_for(settings.precision);
  if (!settings.calibration_file.empty()) {
    Result<Calibration> calibration = load_calibration(settings.calibration_file);
    if (!calibration.is_ok()) return calibration.status();
    context.time_options = calibrated(context.time_options, calibration.value());
    if (calibration->cuda_context_bytes && !settings.cuda_context_bytes) {
      context.measured_context_bytes = calibration->cuda_context_bytes;
    }
  }
  if (allocator_budget(context, settings) <= 0) {
    return Status::error("gpu_mem: " + std::to_string(context.gpu.memory_bytes >> 20) +
                         " MiB leaves nothing after the CUDA context (" +
                         std::to_string(context_bytes(context, settings) >> 20) + " MiB) and the " +
                         std::to_string(static_cast<int>(settings.safety_margin * 100)) +
                         "% safety margin (expected more GPU memory)");
  }
  return context;
}

Result<std::vector<BlockChoice>> user_block_choices(const ModelContext& context,
                                                    const RunSettings& settings) {
  const auto& blocks = context.graph.blocks;
  std::vector<BlockChoice> choices(blocks.size(), BlockChoice::kKeep);
  if (settings.checkpointing == CheckpointPolicy::kEveryBlock) {
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (blocks[b].checkpointable) choices[b] = BlockChoice::kCheckpoint;
    }
  } else if (settings.checkpointing == CheckpointPolicy::kList) {
    for (const std::string& pattern : settings.checkpoint_blocks) {
      bool matched = false;
      for (size_t b = 0; b < blocks.size(); ++b) {
        if (!name_matches(pattern, blocks[b].name)) continue;
        matched = true;
        if (!blocks[b].checkpointable) {
          return Status::error("checkpoint_blocks: block \"" + blocks[b].name + "\" of " +
                               context.graph.name + " cannot be checkpointed (embedding or head)");
        }
        choices[b] = BlockChoice::kCheckpoint;
      }
      if (!matched) {
        return Status::error("checkpoint_blocks: \"" + pattern + "\" matches no block of " +
                             context.graph.name + " (expected a block name such as \"" +
                             blocks[std::min<size_t>(1, blocks.size() - 1)].name + "\" or a glob)");
      }
    }
  }
  return choices;
}

GlobalConfig user_config(const RunSettings& settings) {
  GlobalConfig config;
  config.zero_stage = settings.zero_stage;
  config.offload_optimizer = settings.offload_optimizer;
  config.offload_param = settings.offload_param;
  config.micro_batch = settings.micro_batch;
  const int64_t per_rank = settings.effective_global_batch() / settings.world_size();
  config.grad_accum = std::max<int64_t>(1, per_rank / settings.micro_batch);
  return config;
}

BuiltStep build_step(const ModelContext& context, const RunSettings& settings,
                     const GlobalConfig& config, const StepProfile& profile,
                     Accounting accounting) {
  BuiltStep out;
  out.states = model_states(context.graph, settings, config, accounting);
  out.persistent = profile.persistent;
  StepModel& model = out.model;
  model.blocks = profile.blocks;
  model.base = out.states.params + out.states.optimizer + out.states.master +
               out.states.comm_buckets + account(context.gpu.cublas_workspace_bytes, accounting) +
               profile.persistent + (accounting == Accounting::kReserved ? kPoolSlackBytes : 0);
  model.gathered = out.states.gathered_params;
  // Parameter streaming under ZeRO-3 offload already occupies the host link;
  // activation offload would compete for it, which this model does not price.
  model.allow_offload = settings.allow_activation_offload && config.offload_param == Offload::kNone;
  const size_t n = model.blocks.size();
  model.grads_bwd.assign(n, 0);
  if (out.states.grads_progressive && config.grad_accum == 1) {
    // First (only) micro-step: gradients appear as backward reaches each block.
    int64_t running = 0;
    for (size_t k = n; k-- > 0;) {
      running += out.states.block_grads[k];
      model.grads_bwd[k] = running;
    }
    model.grads_fwd = 0;
  } else {
    model.grads_fwd = out.states.grads_full;
    std::fill(model.grads_bwd.begin(), model.grads_bwd.end(), out.states.grads_full);
  }
  model.grads_optimizer = out.states.grads_full;
  model.copy_ms.resize(n);
  for (size_t k = 0; k < n; ++k) {
    model.copy_ms[k] = static_cast<double>(model.blocks[k].keep) / (context.gpu.host_link_gbps * 1e9) * 1e3;
    out.model_flops += model.blocks[k].model_flops;
  }
  return out;
}

Prediction predict(const ModelContext& context, const RunSettings& settings,
                   const GlobalConfig& config, const std::vector<BlockChoice>& blocks,
                   bool simulate_allocator) {
  Prediction out;
  const StepProfile reserved_profile = profile_step(context.graph, context.analysis, context.compute_dtype,
                                                    config.micro_batch, context.seq_len, Accounting::kReserved, context.gpu,
                                                    context.time_options);
  const StepProfile allocated_profile = profile_step(context.graph, context.analysis, context.compute_dtype,
                                                     config.micro_batch, context.seq_len, Accounting::kAllocated, context.gpu,
                                                     context.time_options);
  const BuiltStep reserved = build_step(context, settings, config, reserved_profile, Accounting::kReserved);
  const BuiltStep allocated = build_step(context, settings, config, allocated_profile, Accounting::kAllocated);
  const StepPeak peak = walk_step(reserved.model, blocks, reserved.persistent);
  out.peak_reserved = peak.bytes;
  out.peak_allocated = walk_step(allocated.model, blocks, allocated.persistent).bytes;

  MemoryBreakdown& m = out.peak;
  m.cuda_context = context_bytes(context, settings);
  m.workspaces = account(context.gpu.cublas_workspace_bytes, Accounting::kReserved);
  m.parameters = reserved.states.params;
  m.gradients = peak.gradients;
  m.optimizer_states = reserved.states.optimizer;
  m.master_weights = reserved.states.master;
  m.zero_buffers = reserved.states.comm_buckets + (peak.block >= 0 ? reserved.states.gathered_params : 0);
  m.activations = peak.activations;
  m.transient = peak.transient;
  m.allocator = kPoolSlackBytes;
  // The caching-allocator simulation sees fragmentation the block walk cannot:
  // when it reserves more, the difference is the allocator's share.
  Simulation simulation;
  if (simulate_allocator) {
    SimulatorOptions quiet;
    quiet.record_events = false;
    quiet.max_memory_samples = 0;
    simulation = simulate(context, settings, config, blocks, quiet);
    out.simulated_peak_reserved = simulation.peak_reserved;
    out.simulated_peak_allocated = simulation.peak_allocated;
    if (simulation.peak_reserved > out.peak_reserved) {
      m.allocator += simulation.peak_reserved - out.peak_reserved;
      out.peak_reserved = simulation.peak_reserved;
    }
  }
  out.gpu_total = m.total();
  out.gpu_capacity = context.gpu.memory_bytes;
  out.gpu_budget = gpu_budget_bytes(context, settings);
  out.where.phase = peak.phase;
  out.where.block = peak.block;
  if (peak.block >= 0) out.where.block_name = context.graph.blocks[peak.block].name;

  out.host_ram = kHostBytesPerRank * settings.gpus_per_node + reserved.states.host_offload +
                 peak.host_activations * settings.gpus_per_node;
  out.host_ram_budget = settings.host_ram_bytes;
  out.checkpoint_bytes = reserved.states.checkpoint;
  // Kept checkpoints plus the one being written before the oldest is removed.
  out.disk = (settings.checkpoints_kept + 1) * reserved.states.checkpoint + reserved.states.nvme;
  out.disk_budget = settings.disk_free_bytes;

  StepTimeInputs times;
  times.seq_len = context.seq_len;
  times.model_flops = reserved.model_flops;
  for (size_t k = 0; k < blocks.size(); ++k) {
    const BlockProfile& block = reserved.model.blocks[k];
    times.micro_fwd_ms += block.fwd_ms;
    const double total = block_ms(reserved.model, static_cast<int>(k), blocks[k]);
    const double recompute = (blocks[k] == BlockChoice::kCheckpoint && block.on_autograd) ? block.fwd_ms : 0;
    const double offload = blocks[k] == BlockChoice::kOffload ? total - block.fwd_ms - block.bwd_ms : 0;
    times.micro_bwd_ms += block.bwd_ms + recompute;
    times.micro_recompute_ms += recompute;
    times.micro_offload_ms += offload;
  }
  out.time = step_time(settings, config, context.gpu, reserved.states, times);
  out.fits_gpu = out.gpu_total <= out.gpu_budget && !simulation.out_of_memory;
  out.simulated_out_of_memory = simulation.out_of_memory;
  out.fits_host = out.host_ram <= out.host_ram_budget;
  out.fits_disk = out.disk <= out.disk_budget;
  return out;
}

// What the user should know about the answer's inputs: budgets that were
// assumed rather than given, and a checkpoint that disagrees with its config.
std::vector<std::string> input_warnings(const ModelContext& context, const RunSettings& settings) {
  std::vector<std::string> out;
  const RunSettings defaults;
  if (settings.host_ram_bytes == defaults.host_ram_bytes) {
    out.push_back("host RAM budget assumed to be 128 GiB per node (give --host-ram)");
  }
  if (settings.disk_free_bytes == defaults.disk_free_bytes) {
    out.push_back("free disk assumed to be 500 GB (give --disk)");
  }
  if (settings.calibration_file.empty()) {
    out.push_back("times use uncalibrated efficiencies (60% of peak matmul rate, 70% of memory bandwidth)");
  }
  for (const std::string& mismatch : context.checkpoint_mismatches) {
    out.push_back("checkpoint vs config.json: " + mismatch);
  }
  return out;
}

Result<FitAnswer> fit(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  if (!context.is_ok()) return context.status();
  Result<std::vector<BlockChoice>> choices = user_block_choices(context.value(), settings);
  if (!choices.is_ok()) return choices.status();
  FitAnswer answer;
  Plan& plan = answer.as_given;
  plan.model = context->graph.name;
  plan.gpu = context->gpu.id;
  plan.settings = settings;
  plan.config = user_config(settings);
  plan.blocks = choices.value();
  for (const graph::Block& block : context->graph.blocks) plan.block_names.push_back(block.name);
  plan.seq_len = context->seq_len;
  plan.prediction = predict(context.value(), settings, plan.config, plan.blocks);
  answer.fits = plan.prediction.fits();
  if (!answer.fits) answer.alternative = find_plan(context.value(), settings);
  answer.warnings = input_warnings(context.value(), settings);
  return answer;
}

Result<PlanResult> plan(const RunSettings& settings, const Progress& progress) {
  Result<ModelContext> context = prepare_context(settings);
  if (!context.is_ok()) return context.status();
  PlanResult result = find_plan(context.value(), settings, progress);
  result.warnings = input_warnings(context.value(), settings);
  return result;
}

}  // namespace headroom::planner
