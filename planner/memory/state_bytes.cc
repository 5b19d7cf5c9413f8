#include "planner/memory/state_bytes.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "planner/mechanisms/float8_linear.h"
#include "planner/mechanisms/fsdp_16_bit_gather.h"
#include "planner/mechanisms/trainability.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

using graph::DType;
using graph::Param;

// bitsandbytes 8-bit optimizers quantize states in blocks with one fp32 absmax per
// block and state (bitsandbytes/optim/optimizer.py init_state). Blocks are 256
// elements from 0.44.0 (2048 up to 0.43.x): the newer, larger count is priced.
constexpr int64_t kBnbBlock = 256;
// torchao AdamW4bit / AdamW8bit (torchao 0.17.0 optim/adam.py, subclass_4bit.py,
// subclass_8bit.py): each state is an OptimState4bit / OptimState8bit of three
// tensors made by its `zeros`: codes (n/2 bytes packed 4-bit, n bytes 8-bit), one
// fp32 scale per block (128 elements for AdamW4bit, 256 for AdamW8bit) and its own
// fp32 copy of the quantization map (torch.tensor(qmap_list): 16 values for 4 bits,
// create_dynamic_map(..., 3, 4) / linspace(0, 1, 17)[1:]; 256 for 8 bits). A tensor
// under 4096 elements, or not a multiple of the block, keeps a plain zeros_like
// state in the parameter's dtype (_new_buffer, "follow bitsandbytes").
constexpr int64_t kTorchao4bitBlock = 128;
constexpr int64_t kTorchao8bitBlock = 256;
constexpr int64_t kTorchaoMinQuantizedSize = 4096;

// The three tensors of each of torchao's two quantized AdamW states, or the two
// plain states of a small tensor. `bits` is 4 or 8.
std::vector<int64_t> torchao_adamw_states(int64_t elements, int bits, int64_t state_width) {
  const int64_t block = bits == 4 ? kTorchao4bitBlock : kTorchao8bitBlock;
  if (elements < kTorchaoMinQuantizedSize || elements % block != 0) {
    return {elements * state_width, elements * state_width};
  }
  const int64_t codes = elements * bits / 8;
  const int64_t scale = elements / block * 4;
  const int64_t qmap = (int64_t{1} << bits) * 4;
  return {codes, scale, qmap, codes, scale, qmap};
}

}  // namespace

std::vector<int64_t> block_param_bytes(const graph::LayerGraph& graph, Precision precision) {
  std::vector<int64_t> per_block(graph.blocks.size(), 0);
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (param.tied_to.empty() && !param.buffer) per_block[node.block] += param_storage_bytes(param, precision);
    }
  }
  return per_block;
}

std::vector<int64_t> block_shard_bytes(const graph::LayerGraph& graph, const RunSettings& settings, int zero_stage) {
  const bool upcast = fsdp_upcasts_trainable(settings, zero_stage);
  std::vector<int64_t> per_block(graph.blocks.size(), 0);
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (!param.tied_to.empty() || param.buffer) continue;
      per_block[node.block] += fsdp_fp32_shard(param, settings.precision, upcast)
                                   ? param.elements() * 4
                                   : param_storage_bytes(param, settings.precision);
    }
  }
  return per_block;
}

// Whether `param` is the weight of an fp8 linear that FSDP2 all-gathers in fp8.
bool gathered_in_fp8(const graph::Node& node, const Param& param, const RunSettings& settings) {
  return settings.float8_all_gather && is_float8_linear(node) && param.name == node.name + ".weight";
}

namespace {

// The bytes FSDP all-gathers of one parameter: an fp8 linear's weight in fp8, an fp32
// shard that FSDP's mixed precision casts to param_dtype first (PEFT's fp32 adapters
// under the Trainer's bf16=True, fsdp_16_bit_gather.h) in 16 bits, the rest as stored.
int64_t gathered_param_bytes(const graph::Node& node, const Param& param, const RunSettings& settings,
                             bool sixteen_bit_gather) {
  if (gathered_in_fp8(node, param, settings)) return graph::dtype_bytes(DType::kF8E4M3, param.elements());
  if (sixteen_bit_gather && stored_dtype(param, settings.precision) == DType::kF32 && !is_quantization_constant(param)) {
    return graph::dtype_bytes(DType::kBF16, param.elements());
  }
  return param_storage_bytes(param, settings.precision);
}

}  // namespace

std::vector<int64_t> block_gathered_bytes(const graph::LayerGraph& graph, const RunSettings& settings) {
  // Asked only where FSDP shards the run: its mixed precision decides the gathered dtype.
  const bool sixteen_bit_gather = fsdp_mixed_precision_in_16_bits(settings);
  std::vector<int64_t> per_block(graph.blocks.size(), 0);
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (!param.tied_to.empty() || param.buffer) continue;
      per_block[node.block] += gathered_param_bytes(node, param, settings, sixteen_bit_gather);
    }
  }
  return per_block;
}

bool fsdp_cpu_offload(const RunSettings& settings, const GlobalConfig& config) {
  return fsdp_shards_params(settings, config.zero_stage) && config.offload_param == Offload::kCpu &&
         config.offload_optimizer == Offload::kCpu;
}

bool fsdp_upcasts_trainable(const RunSettings& settings, int zero_stage) {
  if (settings.stack != Stack::kHfTrainer || settings.precision != Precision::kBf16Pure) return false;
  if (!fsdp_shards_params(settings, zero_stage)) return false;
  // FSDP2's upcast skips a model with Params4bit; FSDP1's upcasts each trainable FlatParameter.
  if (settings.mode == TrainMode::kQlora && shards_with_fsdp2(settings)) return false;
  // mixed_precision "no" (bf16=False) runs no autocast and no upcast.
  return resolve_stack(settings).top.autocast;
}

bool fsdp_fp32_shard(const Param& param, Precision precision, bool upcast) {
  if (is_quantized_storage(stored_dtype(param, precision))) return false;
  return master_bytes_per_element(precision) > 0 || (param.trainable && upcast);
}

bool fsdp_restages_root(const RunSettings& settings, int zero_stage) {
  // Under the upcast the root is cast only when it trains (a full fine-tune's embeddings and head).
  return sharding_of(settings) == Sharding::kFsdp1 &&
         (master_bytes_per_element(settings.precision) > 0 ||
          (fsdp_upcasts_trainable(settings, zero_stage) && settings.mode == TrainMode::kFull));
}

bool accumulates_unsharded(const RunSettings& settings, const GlobalConfig& config) {
  return fsdp_shards_params(settings, config.zero_stage) && config.grad_accum > 1 &&
         resolve_stack(settings).top.fsdp_no_sync;
}

bool fsdp2_carved_ends(const graph::LayerGraph& graph, const RunSettings& settings) {
  if (!accelerate_carves_fsdp2_ends(settings)) return false;
  bool embedding = false, head = false;
  for (const graph::Block& block : graph.blocks) {
    embedding = embedding || block.kind == "embedding";
    head = head || block.kind == "lm_head";
  }
  if (!embedding || !head) return false;
  // Tied: accelerate puts the input embeddings in the tail, which then lives as the root did.
  return std::none_of(graph.nodes.begin(), graph.nodes.end(), [&](const graph::Node& node) {
    return graph.blocks[static_cast<size_t>(node.block)].kind == "lm_head" &&
           std::any_of(node.params.begin(), node.params.end(), [](const graph::Param& p) { return !p.tied_to.empty(); });
  });
}

int fsdp2_kept_tail(const graph::LayerGraph& graph, const RunSettings& settings) {
  if (!fsdp2_carved_ends(graph, settings)) return -1;
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    if (graph.blocks[b].kind == "lm_head") return static_cast<int>(b);
  }
  return -1;
}

bool in_fsdp2_root(const graph::LayerGraph& graph, int index, const RunSettings& settings) {
  const graph::Block& block = graph.blocks[static_cast<size_t>(index)];
  // FSDP1 without an auto_wrap_policy: the root FlatParameter holds every parameter.
  if (settings.fsdp_wrap == FsdpWrap::kModel && sharding_of(settings) == Sharding::kFsdp1) return true;
  if (block.checkpointable) return false;
  if ((block.kind == "embedding" || block.kind == "lm_head") && fsdp2_carved_ends(graph, settings)) return false;
  return std::none_of(settings.fsdp_own_groups.begin(), settings.fsdp_own_groups.end(),
                      [&](const std::string& pattern) { return name_matches(pattern, block.name); });
}

// A PEFT adapter declared fp32 on a pure-bf16 model stays fp32 (4 bytes for the
// weight, its gradient and each torch.optim state, which follow the parameter's
// dtype), as does a module trained in full that the script upcast (kbit_prep.h).
bool fp32_adapter(const Param& param, Precision precision) {
  return precision == Precision::kBf16Pure && param.trainable &&
         ((param.dtype == DType::kF32 && is_lora_adapter(param)) || param.upcast_fp32);
}

DType stored_dtype(const Param& param, Precision precision) {
  // Quantization constants keep their own dtype: fp32 second-level constants, or the
  // fp32 absmax of NF4 without double quantization.
  if (!param.trainable && (is_quantized_storage(param.dtype) ||
                           (param.dtype == DType::kF32 && is_quantization_constant(param)))) {
    return param.dtype;
  }
  // An integer buffer (BatchNorm's num_batches_tracked, int64) is not cast with
  // the model: Module.to(dtype) and .bfloat16() cast floating-point tensors only.
  if (param.buffer && (param.dtype == DType::kInt64 || param.dtype == DType::kInt32)) return param.dtype;
  if (fp32_adapter(param, precision) || param.upcast_fp32 || param_bytes_per_element(precision, param.trainable) == 4) {
    return DType::kF32;
  }
  return precision == Precision::kFp16Mixed ? DType::kF16 : DType::kBF16;
}

int64_t param_storage_bytes(const Param& param, Precision precision) {
  return graph::dtype_bytes(stored_dtype(param, precision), param.elements());
}

ModelSize model_size(const graph::LayerGraph& graph, Precision precision) {
  ModelSize out;
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (!param.tied_to.empty()) continue;
      // Quantization constants and buffers are storage, not parameters of the model.
      if (!is_quantization_constant(param) && !param.buffer) {
        out.total_params += param.elements();
        if (param.trainable) out.trainable_params += param.elements();
      }
      out.weight_bytes_by_dtype[std::string(graph::dtype_name(stored_dtype(param, precision)))] +=
          param_storage_bytes(param, precision);
    }
  }
  return out;
}

std::map<std::string, int> shared_gradient_first_block(const graph::LayerGraph& graph) {
  // Called for every plan the search prices: views of the graph's names, hashed,
  // and strings made only for the few shared owners.
  struct Uses {
    int count = 0;
    int latest_block = 0;
  };
  std::unordered_map<std::string_view, Uses> uses;
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      Uses& owner = uses[param.tied_to.empty() ? param.name : param.tied_to];
      owner.latest_block = owner.count++ == 0 ? node.block : std::max(owner.latest_block, node.block);
    }
  }
  std::map<std::string, int> shared;
  for (const auto& [owner, used] : uses) {
    if (used.count >= 2) shared.emplace(owner, used.latest_block);
  }
  return shared;
}

int64_t grad_bytes(const Param& param, Precision precision) {
  return param.elements() * (fp32_adapter(param, precision) ? 4 : grad_bytes_per_element(precision));
}

int64_t account(int64_t bytes, Accounting accounting) {
  return accounting == Accounting::kAllocated ? allocated_bytes(bytes) : reserved_bytes(bytes);
}

// Mixed precision as DeepSpeed/Megatron do it (ZeRO paper, Sec. 3.1): 16-bit
// parameters and gradients (2 + 2 bytes), fp32 master weights (4) beside the
// optimizer states. fp32 training: 4 + 4, no master. Pure bf16: 2 + 2, no master.
// PyTorch AMP: the fp32 model's own weights and gradients, 4 + 4, no master (the
// 16-bit weight copies are activations: planner/mechanisms/autocast.h).
int64_t param_bytes_per_element(Precision precision, bool /*trainable*/) {
  return precision == Precision::kFp32 || is_autocast(precision) ? 4 : 2;
}

int64_t grad_bytes_per_element(Precision precision) {
  return precision == Precision::kFp32 || is_autocast(precision) ? 4 : 2;
}

int64_t fsdp_reduce_bytes_per_element(const RunSettings& settings) {
  return reduce_dtype_of(settings) == ReduceDtype::kFp32 ? 4 : grad_bytes_per_element(settings.precision);
}

int64_t master_bytes_per_element(Precision precision) {
  return (precision == Precision::kBf16Mixed || precision == Precision::kFp16Mixed) ? 4 : 0;
}

std::vector<int64_t> optimizer_state_tensors(OptimizerKind optimizer, Precision precision,
                                             const std::vector<int64_t>& shape) {
  int64_t elements = 1;
  for (int64_t dim : shape) elements *= dim;
  // torch.optim keeps states in the parameter's dtype: fp32 with a master copy,
  // bf16 in pure-bf16 training.
  const int64_t state_width = precision == Precision::kBf16Pure ? 2 : 4;
  switch (optimizer) {
    case OptimizerKind::kAdamW:  // exp_avg and exp_avg_sq (Loshchilov & Hutter; torch.optim.AdamW)
      return {elements * state_width, elements * state_width};
    case OptimizerKind::kAdamW8bit: {
      // state1, state2 as uint8 codes and their fp32 absmax1, absmax2 (bitsandbytes
      // optim/optimizer.py Optimizer2State.init_state); fp32 states when small.
      if (elements < kBnbMin8bitSize) return {elements * 4, elements * 4};
      const int64_t absmax = ceil_div(elements, kBnbBlock) * 4;
      return {elements, elements, absmax, absmax};
    }
    case OptimizerKind::kAdamW4bit:
      return torchao_adamw_states(elements, 4, state_width);
    case OptimizerKind::kAdamW8bitTorchao:
      return torchao_adamw_states(elements, 8, state_width);
    case OptimizerKind::kSgdMomentum:  // one momentum buffer
      return {elements * state_width};
    case OptimizerKind::kSgd:  // torch.optim.SGD with momentum 0 makes no state (sgd.py _init_group)
      return {};
    case OptimizerKind::kAdafactor: {
      // Factored second moment for matrices: one row and one column vector
      // (Shazeer & Stern 2018, Sec. 3; HF Adafactor keeps them in fp32); no first moment.
      // A tensor of more dimensions factors its last two per leading index: rows
      // are shape[:-1], columns shape[:-2] + shape[-1:] (torch/optim/_adafactor.py
      // row_shape[-1] = 1, col_shape[-2] = 1; transformers' Adafactor likewise).
      if (shape.size() < 2 || elements == 0) return {elements * 4};
      const int64_t rows = elements / shape.back();
      const int64_t cols = elements / shape[shape.size() - 2];
      return {rows * 4, cols * 4};
    }
  }
  return {};
}

int64_t optimizer_state_bytes(OptimizerKind optimizer, Precision precision, const std::vector<int64_t>& shape) {
  int64_t bytes = 0;
  for (int64_t tensor : optimizer_state_tensors(optimizer, precision, shape)) bytes += tensor;
  return bytes;
}

}  // namespace headroom::planner
