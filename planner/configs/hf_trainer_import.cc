#include "planner/configs/hf_trainer_import.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "graph/utf8.h"
#include "planner/configs/args_reader.h"
#include "planner/configs/deepspeed_import.h"
#include "planner/configs/training_args_text.h"
#include "planner/configs/trl_model_args.h"
#include "planner/configs/trl_preference_args.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// optim "sgd": torch.optim.SGD with the momentum optim_args gives (transformers 5.x
// trainer_optimizer.py _get_sgd reads momentum, dampening, weight_decay, nesterov
// from the comma-separated key=value optim_args); torch's default foreach path. With
// momentum one buffer per parameter (torch/optim/sgd.py momentum_buffer); without
// it (the default: _get_sgd passes only the learning rate) SGD keeps no state and
// updates each parameter in place (_multi_tensor_sgd: _foreach_add_(params, grads)).
void read_sgd(ArgsReader& r, RunSettings& s) {
  const std::string args = r.has("optim_args") ? r.string_or("optim_args", "") : "";
  double momentum = 0;
  size_t at = 0;
  while (at < args.size()) {
    const size_t end = std::min(args.find(',', at), args.size());
    std::string pair = args.substr(at, end - at);
    pair.erase(std::remove_if(pair.begin(), pair.end(), [](unsigned char c) { return std::isspace(c); }),
               pair.end());
    if (pair.rfind("momentum=", 0) == 0) momentum = std::atof(pair.c_str() + 9);
    at = end + 1;
  }
  s.optimizer = momentum > 0 ? OptimizerKind::kSgdMomentum : OptimizerKind::kSgd;
  s.optimizer_impl = OptimizerImpl::kForeach;
}

// TrainingArguments.optim (transformers training_args.py OptimizerNames) onto
// the optimizer, its implementation and paging (trainer_optimizer.py builds each).
void read_optim(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (!r.has("optim")) {
    out.notes.push_back("optim not given: transformers' default (adamw_torch_fused in 5.x with torch >= 2.8, "
                        "adamw_torch before) is left open in the band; --optimizer-impl pins it");
    return;
  }
  const std::string optim = r.string_or("optim", "");
  s.optimizer = OptimizerKind::kAdamW;
  s.paged_optimizer = false;
  if (optim == "adamw_torch") {
    s.optimizer_impl = OptimizerImpl::kForeach;
  } else if (optim == "adamw_torch_fused") {
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "adamw_hf") {
    s.optimizer_impl = OptimizerImpl::kForLoop;  // transformers' own AdamW: a Python loop per parameter
  } else if (optim == "adamw_bnb_8bit" || optim == "adamw_8bit" || optim == "paged_adamw_8bit") {
    s.optimizer = OptimizerKind::kAdamW8bit;
    s.paged_optimizer = optim == "paged_adamw_8bit";
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "paged_adamw_32bit") {
    s.paged_optimizer = true;
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "adamw_torch_4bit") {
    s.optimizer = OptimizerKind::kAdamW4bit;
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "adamw_torch_8bit") {
    s.optimizer = OptimizerKind::kAdamW8bitTorchao;  // _get_torchao_optimizer: torchao.optim.AdamW8bit
    s.optimizer_impl = OptimizerImpl::kFused;
  } else if (optim == "adafactor") {
    s.optimizer = OptimizerKind::kAdafactor;
    s.optimizer_impl = OptimizerImpl::kForLoop;
  } else if (optim == "sgd") {
    read_sgd(r, s);
  } else if (optim.starts_with("galore_")) {
    // galore-torch (_get_galore_optimizer): per targeted 2-D weight a projection
    // matrix and AdamW states of rank x n, the *_layerwise ones stepping in
    // post-accumulate-grad hooks; none of it is modelled.
    r.fail("optim",
           "an optimizer headroom models: GaLore's projection matrices, its low-rank states and the layerwise "
           "variants' stepping in backward hooks are not modelled",
           json(optim));
  } else {
    r.fail("optim",
           "one of adamw_torch, adamw_torch_fused, adamw_hf, adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit, "
           "paged_adamw_32bit, adamw_torch_4bit, adamw_torch_8bit, adafactor, sgd (the others' states are not "
           "modelled)",
           json(optim));
  }
}

// fsdp_config (a JSON object or a path in the arguments): its activation
// checkpointing and parameter offload change memory; the wrap policy, prefetch
// and sync flags do not have a model of their own and are listed. Returns the FSDP
// its version names, nullopt when it names none.
std::optional<Sharding> read_fsdp_config(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (!r.has("fsdp_config")) return std::nullopt;
  const json& config = r.raw("fsdp_config");
  if (!config.is_object()) {
    out.notes.push_back("fsdp_config is a file path: not read; give --checkpointing and --offload-param as it says");
    return std::nullopt;
  }
  std::optional<Sharding> version;
  for (const auto& [key, value] : config.items()) {
    const std::string bare = key.starts_with("fsdp_") ? key.substr(5) : key;
    const bool on = value == json(true) || value == json("true") || value == json("True");
    if (bare == "version") {
      if (value != json(1) && value != json(2) && value != json("1") && value != json("2")) {
        r.fail("fsdp_config.version", "1 or 2", value);
        return std::nullopt;
      }
      version = value == json(1) || value == json("1") ? Sharding::kFsdp1 : Sharding::kFsdp2;
    } else if (bare == "activation_checkpointing") {
      if (on) s.checkpointing = CheckpointPolicy::kEveryBlock;
    } else if (bare == "offload_params") {
      if (on) {
        s.offload_param = Offload::kCpu;
        s.offload_optimizer = Offload::kCpu;
      }
    } else if (!value.is_null() && value != json(false)) {
      out.ignored.push_back("fsdp_config." + key);
    }
  }
  return version;
}

// use_liger_kernel: the Trainer patches the model with Liger
// (_apply_liger_kernel_to_instance, given liger_kernel_config as its keyword arguments;
// apply_liger_kernel_to_llama and its siblings default to rope, rms_norm, swiglu and
// fused_linear_cross_entropy). The fused linear cross-entropy is priced
// (--loss fused-linear-ce); its RMSNorm, SwiGLU (GEGLU for Gemma) and RoPE as
// --liger-kernels on (planner/mechanisms/liger_kernels.h): the norm and the gated MLP
// together (each defaults to true); RoPE, in place, keeps what the model's rotation keeps.
bool liger_switch(ArgsReader& r, const json& config, const char* key, bool fallback) {
  if (!config.contains(key)) return fallback;
  if (!config.at(key).is_boolean()) {
    r.fail("liger_kernel_config", std::string(key) + " true or false", config.at(key));
    return fallback;
  }
  return config.at(key).get<bool>();
}

bool read_liger_modules(ArgsReader& r, const json& config) {
  const bool norm = liger_switch(r, config, "rms_norm", true);
  const bool mlp = liger_switch(r, config, "swiglu", liger_switch(r, config, "geglu", true));
  liger_switch(r, config, "rope", true);
  if (norm != mlp) {
    r.fail("liger_kernel_config", "rms_norm and swiglu (geglu) both true or both false (one without the other is "
                                  "not modelled)", config);
  }
  return norm;
}

void read_liger(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  bool fused_linear_ce = true;
  bool modules = true;
  if (r.has("liger_kernel_config") && !r.raw("liger_kernel_config").is_null()) {
    const json& config = r.raw("liger_kernel_config");
    if (!config.is_object()) {
      r.fail("liger_kernel_config", "an object of Liger kernel switches", config);
      return;
    }
    if (config.contains("fused_linear_cross_entropy")) {
      const json& value = config.at("fused_linear_cross_entropy");
      if (!value.is_boolean()) {
        r.fail("liger_kernel_config", "fused_linear_cross_entropy true or false", value);
        return;
      }
      fused_linear_ce = value.get<bool>();
    }
    modules = read_liger_modules(r, config);
  }
  if (fused_linear_ce) s.loss = LossSpec{LossImpl::kFusedLinearCe, 8};
  if (modules) s.liger_kernels = true;
  out.notes.push_back(std::string("use_liger_kernel: ") +
                      (fused_linear_ce ? "Liger's fused linear cross-entropy (--loss fused-linear-ce)" : "") +
                      (fused_linear_ce && modules ? "; " : "") +
                      (modules ? "its RMSNorm, SwiGLU and RoPE kernels (--liger-kernels on)" : ""));
}

// TrainingArguments.fsdp: "full_shard auto_wrap offload" (a string or a list of
// FSDPOption). Full sharding is FSDP2 unless fsdp_config says version 1:
// transformers 5 builds Accelerate's plugin with fsdp_version =
// fsdp_config.get("version", 2) (training_args.py, 5.23); transformers 4 left it to
// Accelerate, whose default is FSDP1.
void read_fsdp(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (!r.has("fsdp")) return;
  std::vector<std::string> options;
  const json& v = r.raw("fsdp");
  if (v.is_string()) {
    options = shell_words(v.get<std::string>());
  } else if (v.is_array()) {
    for (const json& item : v) {
      if (!item.is_string()) return r.fail("fsdp", "FSDP options (full_shard, shard_grad_op, hybrid_shard, offload, auto_wrap)", v);
      options.push_back(item.get<std::string>());
    }
  } else {
    return r.fail("fsdp", "FSDP options (full_shard, shard_grad_op, hybrid_shard, offload, auto_wrap)", v);
  }
  if (options.empty()) return;
  for (const std::string& option : options) {
    if (option == "full_shard") {
      s.zero_stage = 3;
    } else if (option == "shard_grad_op") {
      s.zero_stage = 2;
    } else if (option == "hybrid_shard") {
      s.zero_stage = 3;
      out.shard_within_node = true;  // shard inside a node, replicate across nodes: once --gpus is known
    } else if (option == "no_shard") {
      s.zero_stage = 0;
    } else if (option == "offload") {
      s.offload_param = Offload::kCpu;
      s.offload_optimizer = Offload::kCpu;
    } else if (option == "auto_wrap") {
      // transformers sets the wrap policy (TRANSFORMER_BASED_WRAP from the model's
      // _no_split_modules): a unit a layer, whatever an Accelerate file said.
      s.fsdp_wrap = FsdpWrap::kLayers;
    } else {
      return r.fail("fsdp", "options among full_shard, shard_grad_op, hybrid_shard, no_shard, offload, auto_wrap", v);
    }
  }
  if (s.offload_param == Offload::kCpu && s.zero_stage != 3) {
    return r.fail("fsdp", "offload with full_shard or hybrid_shard", v);
  }
  const std::optional<Sharding> version = read_fsdp_config(r, s, out);
  // HYBRID_SHARD is FSDP1's (transformers 5 refuses it under version 2).
  if (out.shard_within_node && version == Sharding::kFsdp2) {
    return r.fail("fsdp_config.version", "1 with hybrid_shard (FSDP2 has no HYBRID_SHARD strategy in transformers)", 2);
  }
  s.sharding = version ? *version : out.shard_within_node ? Sharding::kFsdp1 : Sharding::kFsdp2;
  if (!version && !out.shard_within_node) {
    out.notes.push_back("fsdp: FSDP2, transformers 5's default; transformers 4 ran FSDP1 (add fsdp_config version 1)");
  }
  if (s.zero_stage != 3) out.notes.push_back("fsdp: priced as DeepSpeed's ZeRO stage " + std::to_string(s.zero_stage));
}

// The device, the batch and the Trainer's precision flags. Returns whether bf16 was given.
bool read_batch_and_precision(ArgsReader& r, RunSettings& s) {
  if (r.boolean_or("use_cpu", false) || r.boolean_or("no_cuda", false)) {
    r.fail(r.has("use_cpu") ? "use_cpu" : "no_cuda", "false (headroom answers for a GPU run)");
  }
  s.micro_batch = r.count_or("per_device_train_batch_size", 8, kMaxMicroBatch);  // TrainingArguments' default 8
  s.grad_accum = r.count_or("gradient_accumulation_steps", 1, kMaxGradAccum);
  const bool bf16 = r.boolean_or("bf16", false);
  const bool fp16 = r.boolean_or("fp16", false);
  if (bf16 && fp16) r.fail("fp16", "false with bf16 true (transformers refuses both)");
  // Trainer(bf16=True) runs the forward under torch.autocast (Accelerate's
  // prepare_model). Over an fp32 model (from_pretrained's default dtype in 4.x)
  // that is AMP; a script that loads the model in bf16 wants --precision bf16.
  if (bf16 || fp16) {
    s.precision = bf16 ? Precision::kBf16Amp : Precision::kFp16Amp;
  } else {
    s.precision = Precision::kFp32;
  }
  return bf16;
}

// gradient_checkpointing_kwargs' use_reentrant (an object, or its JSON text on the
// command line): reentrant checkpointing trains nothing in a layer none of whose
// inputs requires grad (planner/mechanisms/reentrant_checkpoint.h). Left out, it
// is priced as 5.x's default (False); 4.x's default True is named in the notes.
void read_use_reentrant(ArgsReader& r, RunSettings& s) {
  if (!r.has("gradient_checkpointing_kwargs")) return;
  nlohmann::json kwargs = r.raw("gradient_checkpointing_kwargs");
  if (kwargs.is_string()) kwargs = nlohmann::json::parse(kwargs.get<std::string>(), nullptr, false);
  if (!kwargs.is_object()) {
    r.fail("gradient_checkpointing_kwargs", "a JSON object such as {\"use_reentrant\": false}",
           r.raw("gradient_checkpointing_kwargs"));
    return;
  }
  if (!kwargs.contains("use_reentrant")) return;
  const std::optional<bool> reentrant = boolean_of(kwargs.at("use_reentrant"));
  if (!reentrant) {
    r.fail("gradient_checkpointing_kwargs.use_reentrant", "true or false", kwargs.at("use_reentrant"));
    return;
  }
  if (!s.recompute) s.recompute = *reentrant ? Recompute::kBlockReentrant : Recompute::kBlock;
}

// Gradient checkpointing and torch.compile.
void read_checkpointing_and_compile(ArgsReader& r, RunSettings& s) {
  const bool checkpointing =
      r.boolean_or("gradient_checkpointing", false) || r.boolean_or("activation_checkpointing", false);
  // An Accelerate FSDP config read before (fsdp_activation_checkpointing) keeps
  // its checkpointing; the Trainer refuses gradient_checkpointing beside it
  // (transformers trainer.py, create_accelerator_and_postprocess).
  const bool fsdp_checkpointing =
      s.sharding && *s.sharding != Sharding::kDeepspeed && s.checkpointing != CheckpointPolicy::kNone;
  if (fsdp_checkpointing && r.boolean_or("gradient_checkpointing", false)) {
    r.fail("gradient_checkpointing", "false beside the Accelerate config's fsdp_activation_checkpointing (the Trainer "
           "refuses both)");
  }
  if (!fsdp_checkpointing) s.checkpointing = checkpointing ? CheckpointPolicy::kEveryBlock : CheckpointPolicy::kNone;
  read_use_reentrant(r, s);
  // Setting the compile mode or backend turns torch_compile on (TrainingArguments.__post_init__).
  s.compile = r.boolean_or("torch_compile", false) || r.has("torch_compile_mode") || r.has("torch_compile_backend");
  if (s.compile) {
    // Trainer compiles the whole model, whose forward computes the loss
    // (transformers' causal-LM heads call self.loss_function).
    s.compile_loss = true;
  }
}

// Checkpoints kept and saved, batch grouping, and TRL's SFTConfig (a
// TrainingArguments subclass): the sequence cap and packing.
void read_saving_and_sequence(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (r.has("save_total_limit")) s.checkpoints_kept = static_cast<int>(r.count_or("save_total_limit", 2, 1000));
  if (r.boolean_or("save_only_model", false)) s.save_optimizer_state = false;
  // group_by_length: the LengthGroupedSampler orders the padded batches (run_settings.h).
  s.group_by_length = r.boolean_or("group_by_length", false);
  const char* length_key = r.has("max_length") ? "max_length" : "max_seq_length";
  if (r.has(length_key)) {
    s.seq_len = r.count_or(length_key, 1024, kMaxSeqLen);
    if (!r.boolean_or("packing", false) && !r.boolean_or("padding_free", false)) {
      // The dataset's lengths are not in the arguments: from one token to the cap.
      s.shortest_sample = 1;
      out.notes.push_back(std::string(length_key) +
                          ": samples are padded to the longest of each batch; priced at the cap, the most a batch "
                          "holds" + padded_batches_band("1 token"));
    }
  } else {
    r.has("packing");
    r.has("padding_free");
    out.sequence_unknown = true;  // TrainingArguments has no sequence length
  }
}

// deepspeed: a path or an inline config, read over what the arguments said.
void read_deepspeed_argument(ArgsReader& r, RunSettings& s, ConfigImport& out, std::string_view origin) {
  if (!r.has("deepspeed")) return;
  const json& ds = r.raw("deepspeed");
  if (ds.is_string()) out.files_read.push_back({"deepspeed", ds.get<std::string>()});
  Result<RunSettings> with_ds = ds.is_string()
                                    ? load_deepspeed_config(ds.get<std::string>(), s)
                                    : apply_deepspeed_config(ds, s, std::string(origin) + ": deepspeed");
  if (!with_ds.is_ok()) {
    // Named through the key that led to it: the file given is the arguments', not the DeepSpeed config's.
    r.fail(ds.is_string() ? with_ds.status().with_prefix(std::string(origin) + ": deepspeed: ") : with_ds.status());
  } else {
    s = with_ds.value();
    s.stack = Stack::kHfTrainer;
  }
}

// Arguments that change nothing priced, or little: said in notes.
void note_unpriced_arguments(ArgsReader& r, RunSettings& s, ConfigImport& out) {
  if (r.boolean_or("auto_find_batch_size", false)) {
    out.notes.push_back("auto_find_batch_size: the Trainer halves the batch after an out-of-memory error; the "
                        "answer is for the batch as given");
  }
  if (r.boolean_or("tf32", false) && s.precision == Precision::kFp32) {
    out.notes.push_back("tf32: TF32 matmuls are not modelled; fp32 time is priced at the FP32 rate");
  }
}

// TRL: activation offloading moves what autograd saves to the CPU (trl/models/activation_offloading.py);
// with checkpointing that is each block's input.
void read_activation_offloading(ArgsReader& r, RunSettings& s) {
  if (r.boolean_or("activation_offloading", false)) {
    if (s.checkpointing == CheckpointPolicy::kNone) {
      r.fail("activation_offloading", "with gradient_checkpointing (offloading every saved tensor is not modelled)");
    }
    s.offload_checkpoint_inputs = true;
  }
}

// Settings that change memory or time but are not modelled: named in notes.
void note_unmodelled_settings(ArgsReader& r, ConfigImport& out) {
  for (const char* key : {"label_smoothing_factor", "torch_empty_cache_steps"}) {
    if (r.has(key) && r.raw(key) != json(0) && r.raw(key) != json(0.0) && r.raw(key) != json("0") &&
        r.raw(key) != json("0.0")) {
      out.notes.push_back(std::string(key) + " is set: not modelled (" +
                          (std::string(key) == "label_smoothing_factor"
                               ? "the LabelSmoother's fp32 log-softmax over the logits"
                               : "the cache is emptied every N steps, lowering reserved memory") +
                          ")");
    }
  }
}

// Whether an argument's value turns it off (false, "False", 0, "no").
bool turned_off(const json& value) {
  if (value.is_number()) return value == json(0);
  return boolean_of(value) == false;
}

bool names_any(const std::string& key, std::initializer_list<const char*> parts) {
  std::string lower = key;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::any_of(parts.begin(), parts.end(), [&](const char* part) { return lower.find(part) != std::string::npos; });
}

// A launch script's own arguments that choose the method are not TrainingArguments
// and not read (the PEFT examples' run_peft_qlora_fsdp.sh gives train.py
// --use_peft_lora, --use_4bit_quantization and --lora_r through its own
// ModelArguments): priced without them, a QLoRA run becomes a full fp32 fine-tune
// (issue 36). Refused unless the run's flags already say LoRA or QLoRA.
Status refuse_method_arguments(const std::vector<std::string>& unread, const json& args, const RunSettings& s,
                               std::string_view origin) {
  for (const std::string& key : unread) {
    if (turned_off(args.at(key))) continue;
    const bool quantizes = names_any(key, {"4bit", "8bit", "quant", "bnb", "nf4", "gptq"});
    const bool adapts = names_any(key, {"lora", "peft", "adapter", "dora"});
    const bool unpriced = (quantizes && s.mode != TrainMode::kQlora) || (adapts && s.mode == TrainMode::kFull);
    if (!unpriced) continue;
    return Status::invalid_input(
        std::string(origin) + ": " + key +
        ": the script's own argument, which chooses LoRA, QLoRA or a quantized base, is not read by headroom; "
        "expected the method as flags: --lora or --qlora (with --lora-rank N and --lora-targets), or --peft "
        "adapter_config.json");
  }
  return Status::ok();
}

Result<ConfigImport> map_arguments(const json& args, std::string_view origin, RunSettings base) {
  if (!args.is_object())
    return Status::invalid_input(std::string(origin) +
                                 ": expected TrainingArguments as a JSON object");
  ArgsReader r(args, origin);
  ConfigImport out;
  RunSettings& s = out.settings;
  s = std::move(base);
  s.stack = Stack::kHfTrainer;
  const bool bf16 = read_batch_and_precision(r, s);
  read_optim(r, s, out);
  read_checkpointing_and_compile(r, s);
  read_fsdp(r, s, out);
  read_saving_and_sequence(r, s, out);
  read_trl_model_args(r, s, out);
  read_trl_preference_args(r, s, out);
  if (s.precision == Precision::kBf16Amp || s.precision == Precision::kFp16Amp) {
    out.notes.push_back(std::string(bf16 ? "bf16" : "fp16") +
                        ": autocast over the model as loaded; priced for an fp32 load (from_pretrained's default "
                        "before transformers 5); give --precision bf16 if the script loads it in bf16 "
                        "(torch_dtype=torch.bfloat16, or transformers 5's 'auto')");
  }
  read_deepspeed_argument(r, s, out, origin);
  if (r.boolean_or("use_liger_kernel", false)) {
    read_liger(r, s, out);
  } else {
    r.has("liger_kernel_config");  // read: it does nothing without use_liger_kernel
  }
  note_unpriced_arguments(r, s, out);
  read_activation_offloading(r, s);
  note_unmodelled_settings(r, out);
  if (!r.status().is_ok()) return r.status();
  if (Status method = refuse_method_arguments(r.unread(), args, s, origin); !method.is_ok()) return method;
  // What the file says must hold together on its own (DeepSpeed refuses NVMe optimizer
  // offload below ZeRO-3, torchtune in-backward with accumulation, ...).
  if (Status valid = validate_settings(out.settings, origin); !valid.is_ok()) return valid;
  out.ignored = r.unread();
  return out;
}

}  // namespace

Result<ConfigImport> import_training_arguments(std::string_view text, std::string_view origin, RunSettings base) {
  if (const std::optional<size_t> bad = graph::first_invalid_utf8(text)) {
    return Status::invalid_input(std::string(origin) + ": byte " + std::to_string(*bad) +
                                 ": expected UTF-8 text (TrainingArguments JSON or arguments)");
  }
  // A UTF-8 byte-order mark before JSON (as Windows editors save it) is no argument.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') {
    return Status::invalid_input(std::string(origin) +
                                 ": a JSON array (expected TrainingArguments as a JSON object, or a command line)");
  }
  if (first != std::string_view::npos && text[first] == '{') {
    Result<json> args = graph::parse_json_text(text, origin);
    if (!args.is_ok()) return args.status();
    return map_arguments(args.value(), origin, std::move(base));
  }
  Result<json> args = arguments_object(text, origin);
  if (!args.is_ok()) return args.status();
  return map_arguments(args.value(), origin, std::move(base));
}

Result<ConfigImport> import_training_arguments_object(const json& args, std::string_view origin, RunSettings base) {
  return map_arguments(args, origin, std::move(base));
}

Result<ConfigImport> load_training_arguments(const std::string& path, RunSettings base) {
  Result<std::string> text = graph::read_file(path, kMaxConfigFileBytes);
  if (!text.is_ok()) return text.status();
  return import_training_arguments(text.value(), path, std::move(base));
}

}  // namespace headroom::planner
