// RunSettings: how the user would launch the run (precision, optimizer, what
// trains, batch and sequence, parallelism, ZeRO/offload, checkpointing) and the
// budgets and freedoms the planner has. `headroom fit` answers for exactly
// these settings; `headroom plan` may change what the allow_* fields permit.
// JSON form documented in docs/cli-json.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/status.h"
#include "graph/validate.h"
#include "models/zoo.h"
#include "planner/settings/hardware.h"
#include "planner/settings/weight_formats.h"
#include "planner/settings/stack_choices.h"
#include "planner/settings/versions.h"
#include <nlohmann/json_fwd.hpp>

namespace headroom::planner {

enum class Precision {
  kFp32,       // fp32 weights, grads, states
  kBf16Mixed,  // bf16 compute, bf16 params/grads, fp32 master weights in the optimizer
  kFp16Mixed,  // as bf16 mixed, with loss scaling
  kBf16Pure,   // everything bf16, no master weights
  // PyTorch AMP: torch.autocast over an fp32 model. Weights, gradients and
  // optimizer states fp32, no master copy; matmuls run on 16-bit copies of the
  // weights that autograd keeps until backward (docs/memory-model.md, "Precision").
  kBf16Amp,
  kFp16Amp,    // as bf16-amp in fp16, with a GradScaler
};

// Whether the model's weights stay fp32 and autocast casts them per matmul.
inline bool is_autocast(Precision p) { return p == Precision::kBf16Amp || p == Precision::kFp16Amp; }

// kAdamW8bit is bitsandbytes' AdamW8bit; kAdamW4bit and kAdamW8bitTorchao are
// torchao's AdamW4bit and AdamW8bit; kSgd is torch.optim.SGD without momentum (no state).
enum class OptimizerKind { kAdamW, kAdamW8bit, kAdamW4bit, kSgdMomentum, kAdafactor, kSgd, kAdamW8bitTorchao };

enum class TrainMode {
  kFull,   // every parameter not matched by freeze_patterns trains
  kLora,   // base frozen; LoRA adapters on lora.targets train
  kQlora,  // as LoRA, with the base linears quantized to 4-bit NF4 (double quantization)
};

enum class Offload { kNone, kCpu, kNvme };

// Who offloads the optimizer to the CPU (offload_optimizer cpu).
enum class CpuOffloadImpl {
  kZeroOffload,        // DeepSpeed ZeRO-Offload: ZeRO >= 1, fp32 master and states on the host
  kTorchao,            // torchao CPUOffloadOptimizer: one GPU, no ZeRO; gradients stay on the GPU
  kTorchaoGradients,   // the same with offload_gradients=True: each gradient freed once copied out
};

enum class CheckpointPolicy {
  kNone,        // no activation checkpointing
  kEveryBlock,  // every checkpointable block
  kList,        // the blocks named in checkpoint_blocks
};

enum class BlockChoice { kKeep, kCheckpoint, kOffload };

struct LoraSettings {
  int64_t rank = 16;
  std::vector<std::string> targets;  // module-name suffixes; empty = the model's defaults
  double dropout = 0.05;
  // DoRA (PEFT's use_dora, torchtune's use_dora): a trainable magnitude per output
  // row and a weight norm per forward (planner/mechanisms/dora.h).
  bool dora = false;
};

// Adapters of their own inside one part of the model (XTuner's visual_encoder_lora
// on LLaVA's vision tower, next to llm_lora): linears whose names match `scope`
// (a glob) get `lora` instead of the main adapters; empty targets: every linear
// there, as XTuner's find_all_linear_names picks them.
struct ScopedLora {
  std::string scope;
  LoraSettings lora;
};

struct RunSettings {
  std::string model = "llama-3-8b";  // zoo name or layer-graph JSON path

  // The training stack and its overrides (planner/settings/stack.h, docs/stacks.md).
  Stack stack = Stack::kUnspecified;
  std::optional<OptimizerImpl> optimizer_impl;  // nullopt: as the stack does (or a band)
  std::optional<LossSpec> loss;                 // nullopt: as the stack does (or a band)
  std::optional<Recompute> recompute;           // nullopt: as the stack does (or a band)
  std::optional<AdapterDtype> adapter_dtype;    // nullopt: as the stack does (or a band)
  std::optional<Sharding> sharding;             // ZeRO-3 by DeepSpeed, FSDP1 or FSDP2; nullopt: as the stack does
  std::optional<ReduceDtype> reduce_dtype;      // FSDP's gradient reduce dtype; nullopt: reduce_dtype_of
  FsdpWrap fsdp_wrap = FsdpWrap::kLayers;       // FSDP1's units: each layer, or the whole model as one
  // FSDP accumulates the micro-steps before the last under no_sync (StackSpec::fsdp_no_sync);
  // nullopt: as the stack does (or a band).
  std::optional<bool> fsdp_no_sync;
  // QLoRA: what the script does to the unquantized weights before training
  // (StackSpec::kbit_prep); nullopt: as the stack does (or a band).
  std::optional<KbitPrep> kbit_prep;
  // Precision bf16: whether the forward runs under torch.autocast over the bf16
  // weights (StackSpec::autocast); nullopt: as the stack does (or a band).
  std::optional<bool> autocast;
  // The library releases the run uses (--versions, --pip-freeze): they decide what the
  // stack leaves open where a release changed it (settings/versions.h).
  PackageVersions versions;
  // SDPA over grouped K/V: whether the model copies K and V to every head first
  // (transformers' repeat_kv before 4.54; StackSpec::repeat_kv); nullopt: as the
  // stack and its releases do (or a band).
  std::optional<bool> repeat_kv;
  // Whether every attention layer keeps its own RoPE cos/sin cache (transformers
  // before 4.45 for Qwen2 and GPT-NeoX, torchtune's lora_ builders; StackSpec::rope_modules);
  // nullopt: as the stack and its releases do (or a band).
  std::optional<bool> layer_rope_caches;
  // LoRA with checkpointing: whether the frozen input embeddings' output is made to
  // require grad (transformers' enable_input_require_grads; StackSpec::input_require_grads);
  // nullopt: as the stack and its releases do.
  std::optional<bool> input_require_grads;
  // Whether the previous step's gradients live through the next forward (the loop
  // calls zero_grad between the loss and backward(); StackSpec::grads_through_forward);
  // nullopt: as the stack does (a band for a plain loop).
  std::optional<bool> grads_through_forward;
  // What the step trains for (StackSpec::recipe; nullopt: supervised) and, for DPO,
  // where the reference log-probs come from (StackSpec::reference; nullopt: as TRL
  // does for the mode: the adapter-disabled base under LoRA, a frozen copy otherwise).
  std::optional<Recipe> recipe;
  std::optional<Reference> reference;
  // GRPO (TRL's GRPOConfig; docs/stacks.md, "Recipes"): seq_len is the longest prompt plus
  // max_completion_length (completion_tokens, TRL's default 512); per_device_train_batch_size
  // (micro_batch) counts completions; generation runs every steps_per_generation micro-steps
  // over micro_batch x steps_per_generation completions (nullopt: grad_accum, TRL's default),
  // num_generations of each prompt.
  std::optional<int64_t> completion_tokens;
  int64_t num_generations = 8;
  std::optional<int64_t> steps_per_generation;
  // GRPO's generation engine (StackSpec::generation; nullopt: transformers' generate, TRL's
  // use_vllm false) and, colocated, vLLM's gpu_memory_utilization (nullopt: GRPOConfig's
  // 0.3) and max_model_len (nullopt: the model's maximum positions, as vLLM infers it)
  // (planner/mechanisms/vllm_engine.h).
  std::optional<Generation> generation;
  std::optional<double> vllm_gpu_memory_utilization;
  std::optional<int64_t> vllm_max_model_len;
  // torch.compile on the model and loss (torchtune compile: True, torchtitan
  // --training.compile): checkpointable blocks save what the min-cut partitioner
  // keeps (planner/mechanisms/compiled_blocks.h) and run their pointwise ops as fused
  // kernels (planner/mechanisms/fused_kernels.h); a chunked loss is priced as compiled
  // (docs/stacks.md).
  bool compile = false;
  // With compile: whether torch.compile also covers the loss function
  // (StackSpec::compile_loss); nullopt: as the stack does (or a band).
  std::optional<bool> compile_loss;
  // Liger's RMSNorm, SwiGLU and RoPE kernels in the model (the Trainer's
  // use_liger_kernel; planner/mechanisms/liger_kernels.h); nullopt: off.
  std::optional<bool> liger_kernels;
  // fp8 training with torchao's Float8Linear (planner/mechanisms/float8_linear.h): its
  // recipe, and whether FSDP2 all-gathers the converted weights in fp8
  // (Float8LinearConfig.enable_fsdp_float8_all_gather; needs ZeRO-3 under an FSDP2 stack).
  Float8Recipe float8 = Float8Recipe::kNone;
  bool float8_all_gather = false;

  // The run as the user launches it.
  Precision precision = Precision::kBf16Mixed;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  TrainMode mode = TrainMode::kFull;
  std::vector<std::string> freeze_patterns;  // glob patterns over node names ("*vision_tower*")
  // LoRA/QLoRA: base modules that train in full anyway (e.g. "*multi_modal_projector*").
  std::vector<std::string> train_patterns;
  // LoRA/QLoRA: modules that get no adapter even when their names match the
  // targets (LLaVA's vision tower has q_proj/k_proj/v_proj too).
  std::vector<std::string> lora_skip = {"*vision_tower*"};
  // QLoRA: linears kept in 16 bits (transformers skips the output embedding).
  std::vector<std::string> quantize_skip = {"*lm_head*", "*vision_tower*", "*multi_modal_projector*"};
  // FSDP2: blocks outside the layers (graph block names or globs, "embeddings",
  // "head") wrapped by a fully_shard of their own, as torchtune's
  // custom_sharded_layers does; the rest belong to the root group.
  std::vector<std::string> fsdp_own_groups;
  LoraSettings lora;
  std::vector<ScopedLora> scoped_lora;  // LoRA/QLoRA: more adapters, scope by scope
  // QLoRA: bitsandbytes double quantization (an 8-bit absmax per 64 weights with an
  // fp32 constant per 256 of those); false: one fp32 absmax per 64 weights, as
  // transformers' BitsAndBytesConfig defaults (bnb_4bit_use_double_quant=False).
  bool nf4_double_quant = true;
  // QLoRA's storage of the frozen base: bitsandbytes NF4, or GPTQ int4 with one
  // scale and zero per `gptq_group_size` input rows (planner/mechanisms/gptq_linear.h).
  QuantFormat quant = QuantFormat::kNf4;
  int64_t gptq_group_size = kGptqDefaultGroupSize;
  models::AttentionImpl attention = models::AttentionImpl::kSdpa;
  // Flex attention over packed samples with a document mask (torchtune packed):
  // the mean document length in tokens. The mask skips the tiles between
  // documents (planner/mechanisms/document_mask.h); nullopt: one causal document per row.
  std::optional<int64_t> document_tokens;
  // Unpacked data padded per batch (transformers' DataCollatorWithPadding, torchtune
  // and LLaMA-Factory without packing): samples run from this many tokens to
  // seq_len, and each micro-batch is as long as its longest sample. The simulator
  // replays batches of such lengths after the steps at seq_len (docs/simulator.md,
  // "Batches of varied length"); nullopt: every batch at seq_len (packed or
  // padded to max_length).
  std::optional<int64_t> shortest_sample;
  // The Trainer's group_by_length (LengthGroupedSampler): batches come from
  // megabatches of 50 x micro_batch x grad_accum samples sorted longest first, the
  // longest sample of all first (transformers trainer_pt_utils.py
  // get_length_grouped_indices). Orders the replay of shortest_sample's batches.
  bool group_by_length = false;
  std::optional<double> dropout;  // nullopt = the model's default
  bool precomputed_text_embeddings = true;  // Flux: text encoders not on the GPU
  // Flux: T5 tokens per sample (diffusers' --max_sequence_length); nullopt: 512.
  std::optional<int64_t> text_tokens;
  // T5 (encoder-decoder): decoder tokens per sample, the labels' length; seq_len is
  // the encoder's. nullopt: 128 (models/t5.h kT5DefaultTargetTokens).
  std::optional<int64_t> target_tokens;

  int64_t micro_batch = 1;
  int64_t seq_len = 0;      // 0 = model default; tokens (or image tokens)
  int64_t resolution = 0;   // image models: pixels per side; overrides seq_len
  int64_t grad_accum = 1;
  int64_t global_batch = 0;  // 0 = micro_batch * grad_accum * world size
  int gpus_per_node = 1;
  int nodes = 1;

  int zero_stage = 0;
  Offload offload_optimizer = Offload::kNone;
  Offload offload_param = Offload::kNone;
  int64_t reduce_bucket_elements = 500'000'000;     // DeepSpeed default reduce_bucket_size
  int64_t allgather_bucket_elements = 500'000'000;  // DeepSpeed default allgather_bucket_size
  int64_t prefetch_bucket_elements = 50'000'000;    // DeepSpeed stage3_prefetch_bucket_size
  int64_t max_live_parameters = 1'000'000'000;      // DeepSpeed stage3_max_live_parameters
  int64_t sub_group_elements = 1'000'000'000;       // DeepSpeed sub_group_size (ZeRO-3)
  bool overlap_comm = true;

  CheckpointPolicy checkpointing = CheckpointPolicy::kNone;
  std::vector<std::string> checkpoint_blocks;
  // Blocks whose saved activations go to pinned host memory during forward and
  // come back for backward (a plan's `offload` choice; docs/memory-model.md,
  // "Activation offload"): what `plan` chose, given back to `fit`.
  std::vector<std::string> offload_blocks;
  // Checkpointed blocks keep their inputs in pinned host memory, as torchtune's
  // enable_activation_offloading does (docs/stacks.md, "Offloading checkpoint inputs").
  bool offload_checkpoint_inputs = false;
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (planner/memory/expandable_pool.h);
  // nullopt: as the stack's launcher sets it (uses_expandable_segments).
  std::optional<bool> expandable_segments;
  // bitsandbytes' paged optimizers (PagedAdamW, PagedAdamW8bit): the states of
  // tensors of 10^5 elements and more live in CUDA unified memory, outside the
  // caching allocator, and move to host RAM when the GPU runs short.
  bool paged_optimizer = false;

  // Hardware and budgets.
  std::string gpu = "a6000";
  // --gpu-file: a GPU described in full by the user, used instead of the catalogue's
  // `gpu` (which then holds its id); plan files carry it (docs/hardware.md, "--gpu-file").
  std::optional<GpuSpec> gpu_spec;
  std::optional<int64_t> gpu_memory_bytes;       // --gpu-mem overrides the catalogue
  std::optional<int64_t> cuda_context_bytes;     // measured value overrides the catalogue
  std::string calibration_file;                  // calibration JSON (docs/calibration.md), optional
  // The host RAM per node and the free disk, when given. A given budget decides
  // the verdict; an assumed one (kAssumedHostRamBytes, kAssumedDiskBytes) is said,
  // and a run over it fits with what it needs named (docs/cli.md, "Budgets").
  std::optional<int64_t> host_ram_bytes;
  std::optional<int64_t> disk_free_bytes;
  static constexpr int64_t kAssumedHostRamBytes = 128LL << 30;
  static constexpr int64_t kAssumedDiskBytes = 500'000'000'000;
  int64_t host_ram_budget() const { return host_ram_bytes.value_or(kAssumedHostRamBytes); }
  int64_t disk_budget() const { return disk_free_bytes.value_or(kAssumedDiskBytes); }
  double safety_margin = 0.05;                    // fraction of GPU memory kept free
  double network_gbps = 12.5;                     // inter-node, GB/s (100 Gb/s Ethernet/IB)
  double nvme_gbps = 3.0;                         // NVMe sequential bandwidth, GB/s
  int checkpoints_kept = 2;                       // training-state checkpoints kept on disk
  bool save_optimizer_state = true;

  // What the planner may change.
  int max_zero_stage = 3;
  // What the plan may change (planner/settings/may_change.h): knob names, "stack"
  // or "all"; empty: what the stack changes without editing the user's code.
  std::vector<std::string> may_change;
  bool allow_cpu_offload = true;
  bool allow_nvme_offload = false;
  bool allow_activation_offload = true;
  bool allow_micro_batch_change = true;

  CpuOffloadImpl cpu_offload = CpuOffloadImpl::kZeroOffload;
  // Hybrid sharding (HSDP: FSDP HYBRID_SHARD, torchtitan data_parallel_replicate
  // x shard degrees, fms-fsdp "hsdp"): ZeRO shards over groups of this many GPUs
  // and replicates across the groups. 0: one group of every GPU.
  int shard_gpus = 0;

  int world_size() const { return gpus_per_node * nodes; }
  int shard_group_size() const { return shard_gpus > 0 ? shard_gpus : world_size(); }
  int64_t effective_global_batch() const {
    return global_batch > 0 ? global_batch : micro_batch * grad_accum * world_size();
  }
  // Whether a rank runs more than one micro-step per optimizer step.
  bool accumulates() const { return effective_global_batch() > micro_batch * world_size(); }
};

// Documented maxima (docs/cli-json.md, "Limits"): every way settings arrive
// (flags, --settings, --deepspeed, plan files) is held to them by
// validate_settings. Within them the planner's int64 byte arithmetic cannot
// overflow, and every answer comes in seconds.
inline constexpr int64_t kMaxMicroBatch = graph::kValidateMaxBatch;  // every graph's sizes are checked up to it
inline constexpr int64_t kMaxGradAccum = 1'000'000;
inline constexpr int64_t kMaxGlobalBatch = 1'000'000'000;  // samples per optimizer step over all GPUs
inline constexpr int64_t kMaxSeqLen = 16'000'000;
inline constexpr int64_t kMaxResolution = 65'536;
inline constexpr int64_t kMaxGpusPerNode = 64;
inline constexpr int64_t kMaxNodes = 4096;
inline constexpr int64_t kMaxLoraRank = 65'536;
inline constexpr int64_t kMaxBucketElements = 1'000'000'000'000;
inline constexpr int64_t kMaxBudgetBytes = int64_t{1} << 60;  // 1 EiB: GPU memory, host RAM, disk
inline constexpr int64_t kMaxContextBytes = int64_t{1} << 40;
inline constexpr double kMaxBandwidthGbps = 1e6;
// Of the model: blocks planned (the largest published LLMs have under 130
// layers; 256 keeps the worst-case plan search near 20 s here), and the
// micro-batches the plan search tries (a geometric spread of the divisors of
// the per-GPU batch when it has more).
inline constexpr size_t kMaxBlocks = 256;
inline constexpr size_t kMaxMicroBatchCandidates = 12;

// Names for messages and JSON.
std::string_view precision_name(Precision value);
std::string_view optimizer_name(OptimizerKind value);
std::string_view mode_name(TrainMode value);
std::string_view offload_name(Offload value);
std::string_view block_choice_name(BlockChoice value);
std::string_view cpu_offload_name(CpuOffloadImpl value);
std::string_view attention_name(models::AttentionImpl value);
std::optional<models::AttentionImpl> parse_attention(std::string_view text);
std::optional<CpuOffloadImpl> parse_cpu_offload(std::string_view text);
std::optional<Precision> parse_precision(std::string_view text);
std::optional<OptimizerKind> parse_optimizer(std::string_view text);
std::optional<TrainMode> parse_mode(std::string_view text);
std::optional<Offload> parse_offload(std::string_view text);
std::optional<BlockChoice> parse_block_choice(std::string_view text);
// The choices, "a, b, c", for messages and --help.
std::string precision_names();
std::string optimizer_names();
std::string mode_names();
std::string offload_names();
std::string attention_names();
std::string cpu_offload_names();

}  // namespace headroom::planner
