#include "planner/configs/xtuner_import.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/atomic_file.h"
#include "planner/configs/mmengine_config.h"
#include "planner/settings/lora_targets.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// Image tokens of the zoo's LLaVA tower (CLIP ViT-L/14 at 336 px: 24 x 24 patches).
constexpr int64_t kLlavaImageTokens = 576;

using Reader = MmengineReader;

// torch_dtype as from_pretrained takes it: torch.float16, "bfloat16", "auto".
enum class Dtype { kFp32, kFp16, kBf16 };
std::optional<Dtype> torch_dtype(const json* value) {
  const std::optional<std::string> name = import_name(value);
  if (!name) return std::nullopt;
  const std::string n = last_name(*name);
  if (n == "float16" || n == "half") return Dtype::kFp16;
  if (n == "bfloat16") return Dtype::kBf16;
  if (n == "float32" || n == "float") return Dtype::kFp32;
  return std::nullopt;
}

// A peft LoraConfig dict: rank, dropout and targets (None: XTuner's
// find_all_linear_names, every nn.Linear suffix but lm_head, which is the graph's
// own adapter list for a decoder).
Status read_lora(Reader& r, const json& lora, const std::string& path, LoraSettings& out, bool& all_linear) {
  const std::optional<std::string> type = import_name(Reader::at(lora, "type"));
  if (!type || last_name(*type) != "LoraConfig") return r.fail(path + ".type", "peft.LoraConfig", lora.value("type", json()));
  out.rank = 8;        // peft LoraConfig defaults
  out.dropout = 0.0;
  out.targets.clear();
  if (const json* rank = Reader::at(lora, "r")) {
    if (!rank->is_number_integer() || rank->get<int64_t>() < 1) return r.fail(path + ".r", "a positive integer", *rank);
    out.rank = rank->get<int64_t>();
  }
  if (const json* dropout = Reader::at(lora, "lora_dropout")) {
    if (!dropout->is_number()) return r.fail(path + ".lora_dropout", "a probability", *dropout);
    out.dropout = dropout->get<double>();
  }
  all_linear = true;
  if (const json* targets = Reader::at(lora, "target_modules")) {
    if (targets->is_array() && !targets->empty() &&
        std::all_of(targets->begin(), targets->end(), [](const json& t) { return t.is_string(); })) {
      for (const json& t : *targets) out.targets.push_back(t.get<std::string>());
      all_linear = false;
    } else if (*targets != json("all-linear")) {
      return r.fail(path + ".target_modules", "a list of module names or \"all-linear\"", *targets);
    }
  }
  if (const json* bias = Reader::at(lora, "bias"); bias != nullptr && *bias != json("none")) {
    return r.fail(path + ".bias", "\"none\" (trained biases are not modelled)", *bias);
  }
  out.dora = is_true(Reader::at(lora, "use_dora"));  // peft LoraConfig(use_dora=True)
  if (Reader::at(lora, "modules_to_save") != nullptr) {
    return r.fail(path + ".modules_to_save", "none (give --train PATTERN for modules trained in full)",
                  lora.at("modules_to_save"));
  }
  r.rest(lora, path, {"type", "r", "lora_dropout", "target_modules", "bias", "use_dora", "modules_to_save",
                      "lora_alpha", "task_type", "init_lora_weights", "inference_mode"});
  return Status::ok();
}

// What one from_pretrained dict of XTuner's says about a model part.
struct LoadedPart {
  std::optional<Dtype> dtype;  // torch_dtype; nullopt: transformers 4's default, fp32
  bool quantized = false;      // bitsandbytes 4-bit
};

Status read_pretrained(Reader& r, const json& part, const std::string& path, RunSettings& s, LoadedPart& out) {
  const std::optional<std::string> type = import_name(Reader::at(part, "type"));
  if (!type || !type->ends_with("from_pretrained")) {
    return r.fail(path + ".type", "a from_pretrained loader (transformers.AutoModelForCausalLM.from_pretrained, ...)",
                  part.value("type", json()));
  }
  if (const json* dtype = Reader::at(part, "torch_dtype")) {
    out.dtype = torch_dtype(dtype);
    if (!out.dtype) return r.fail(path + ".torch_dtype", "torch.float16, torch.bfloat16 or torch.float32", *dtype);
  }
  if (const json* attention = Reader::at(part, "attn_implementation")) {
    if (*attention == json("eager")) {
      s.attention = models::AttentionImpl::kEager;
    } else if (*attention != json("sdpa") && *attention != json("flash_attention_2")) {
      return r.fail(path + ".attn_implementation", "eager, sdpa or flash_attention_2", *attention);
    }
  }
  if (const json* quant = Reader::at(part, "quantization_config")) {
    const std::string q = path + ".quantization_config";
    const std::optional<std::string> qtype = import_name(Reader::at(*quant, "type"));
    if (!qtype || last_name(*qtype) != "BitsAndBytesConfig") {
      return r.fail(q + ".type", "transformers.BitsAndBytesConfig", quant->value("type", json()));
    }
    if (is_true(Reader::at(*quant, "load_in_8bit"))) return r.fail(q + ".load_in_8bit", "false (8-bit weights are not modelled)", true);
    if (!is_true(Reader::at(*quant, "load_in_4bit"))) return r.fail(q + ".load_in_4bit", "true", quant->value("load_in_4bit", json()));
    // BitsAndBytesConfig's defaults: bnb_4bit_quant_type "fp4", no double quantization.
    const json* kind = Reader::at(*quant, "bnb_4bit_quant_type");
    if (kind == nullptr || *kind != json("nf4")) {
      return r.fail(q + ".bnb_4bit_quant_type", "\"nf4\" (FP4, BitsAndBytesConfig's default, is not modelled)",
                    kind != nullptr ? *kind : json("fp4"));
    }
    s.quant = QuantFormat::kNf4;
    s.nf4_double_quant = is_true(Reader::at(*quant, "bnb_4bit_use_double_quant"));
    out.quantized = true;
    r.rest(*quant, q, {"type", "load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
                       "bnb_4bit_compute_dtype", "llm_int8_threshold", "llm_int8_has_fp16_weight"});
  }
  r.rest(part, path, {"type", "torch_dtype", "attn_implementation", "quantization_config",
                      "pretrained_model_name_or_path", "trust_remote_code"});
  return Status::ok();
}

// What the model dict says that the later steps need.
struct XtunerModel {
  bool llava = false;     // LLaVAModel; else SupervisedFinetune
  bool adapters = false;  // the LLM has a LoRA dict
  LoadedPart language;    // how the LLM loads
  bool llm_fp32 = false;  // the LLM's weights are fp32 (as loaded, or after k-bit preparation)
  bool vision_fp32 = true;
};

// The model: SupervisedFinetune (a causal LM) or LLaVAModel (xtuner/model/sft.py, llava.py).
Result<const json*> read_model_type(Reader& r, const json& cfg, XtunerModel& m) {
  const json* model = Reader::at(cfg, "model");
  if (model == nullptr || !model->is_object()) return r.fail("model", "a dict with type SupervisedFinetune or LLaVAModel");
  const std::optional<std::string> model_type = import_name(Reader::at(*model, "type"));
  const std::string kind = model_type ? last_name(*model_type) : "";
  if (kind != "SupervisedFinetune" && kind != "LLaVAModel") {
    return r.fail("model.type", "xtuner.model.SupervisedFinetune or xtuner.model.LLaVAModel", model->value("type", json()));
  }
  m.llava = kind == "LLaVAModel";
  return model;
}

// Adapters. SupervisedFinetune: `lora`; LLaVAModel: `llm_lora` (the tower's is read with the tower).
Status read_llm_lora(Reader& r, const json& model, RunSettings& s, XtunerModel& m) {
  const char* lora_key = m.llava ? "llm_lora" : "lora";
  const json* lora = Reader::at(model, lora_key);
  m.adapters = lora != nullptr;
  bool all_linear = false;
  if (lora != nullptr) {
    if (Status read = read_lora(r, *lora, std::string("model.") + lora_key, s.lora, all_linear); !read.is_ok()) return read;
    s.mode = m.language.quantized ? TrainMode::kQlora : TrainMode::kLora;
    if (all_linear) {
      // XTuner wraps only the LLM (get_peft_model(self.llm)): the projector keeps no adapter.
      s.lora.targets = {std::string(kAllLinear)};
      if (m.llava) s.lora_skip.push_back("*multi_modal_projector*");
      r.note(std::string("model.") + lora_key +
             ".target_modules: XTuner's find_all_linear_names, every linear of the LLM but lm_head, as PEFT's "
             "all-linear selects them");
    }
  } else if (m.language.quantized) {
    return r.fail("model.llm.quantization_config", std::string("a 4-bit LLM with model.") + lora_key +
                                                        " (a frozen 4-bit LLM without adapters is not modelled)");
  } else {
    s.mode = TrainMode::kFull;
  }
  // XTuner calls peft's prepare_model_for_kbit_training before get_peft_model,
  // quantized or not (sft.py _prepare_for_lora, llava.py _prepare_llm_for_lora): it
  // casts every 16-bit parameter that is not a bitsandbytes Params4bit to fp32
  // (peft/utils/other.py). The LLM is then an fp32 model around its 4-bit linears.
  m.llm_fp32 = lora != nullptr || !m.language.dtype || *m.language.dtype == Dtype::kFp32;
  return Status::ok();
}

// model.llm: how it loads, where it comes from, and its adapters.
Status read_language_model(Reader& r, const json& model, RunSettings& s, XtunerModel& m) {
  const json* llm = Reader::at(model, "llm");
  if (llm == nullptr || !llm->is_object()) return r.fail("model.llm", "a from_pretrained dict");
  if (Status read = read_pretrained(r, *llm, "model.llm", s, m.language); !read.is_ok()) return read;
  if (const json* path = Reader::at(*llm, "pretrained_model_name_or_path")) {
    r.note("model.llm.pretrained_model_name_or_path is " + json_excerpt(*path, 200) +
           (m.llava ? ": give MODEL as a LLaVA graph of that LLM and the visual encoder (the zoo's llava-llama-3-8b is "
                      "Llama-3-8B-Instruct with CLIP ViT-L/14-336)"
                    : ": give MODEL as that model (its directory or config.json, or a zoo name)"));
  }
  return read_llm_lora(r, model, s, m);
}

// visual_encoder_lora: adapters on the tower, beside the LLM's.
Status read_tower_lora(Reader& r, const json& vlora, RunSettings& s, const XtunerModel& m) {
  if (!m.adapters) {
    return r.fail("model.visual_encoder_lora", "with model.llm_lora (adapters on the tower alone are not modelled)");
  }
  ScopedLora scoped;
  scoped.scope = "*vision_tower*";
  bool tower_all = false;  // read_lora leaves the targets empty: every linear of the tower
  if (Status read = read_lora(r, vlora, "model.visual_encoder_lora", scoped.lora, tower_all); !read.is_ok()) {
    return read;
  }
  s.scoped_lora.push_back(scoped);
  r.note("model.visual_encoder_lora: rank " + std::to_string(scoped.lora.rank) +
         (tower_all ? " on every linear of the vision tower (find_all_linear_names)" : " on its target_modules") +
         ", beside the LLM's rank " + std::to_string(s.lora.rank));
  return Status::ok();
}

// LLaVAModel's visual_encoder: how it loads, and whether it trains.
Status read_vision_tower(Reader& r, const json& model, RunSettings& s, XtunerModel& m) {
  const bool freeze_vision = is_true(Reader::at(model, "freeze_visual_encoder"));
  const json* vision = Reader::at(model, "visual_encoder");
  if (vision == nullptr || !vision->is_object()) return r.fail("model.visual_encoder", "a from_pretrained dict");
  LoadedPart tower;
  if (Status read = read_pretrained(r, *vision, "model.visual_encoder", s, tower); !read.is_ok()) return read;
  if (tower.quantized) {
    return r.fail("model.visual_encoder.quantization_config", "none (a 4-bit tower is not modelled)");
  }
  m.vision_fp32 = !tower.dtype || *tower.dtype == Dtype::kFp32;
  if (const json* vlora = Reader::at(model, "visual_encoder_lora")) return read_tower_lora(r, *vlora, s, m);
  if (!freeze_vision) {
    // The tower trains in full (LLaVAModel only freezes it when told): in
    // adapter mode that must be said; in full mode nothing freezes it.
    if (s.mode != TrainMode::kFull) s.train_patterns.push_back("*vision_tower*");
  } else if (s.mode == TrainMode::kFull) {
    s.freeze_patterns.push_back("*vision_tower*");
  }
  return Status::ok();
}

// LLaVAModel's parts beside the LLM: the tower, the projector and the image features.
Status read_llava_parts(Reader& r, const json& model, RunSettings& s, XtunerModel& m) {
  const bool freeze_llm = is_true(Reader::at(model, "freeze_llm"));
  if (Status read = read_vision_tower(r, model, s, m); !read.is_ok()) return read;
  // The projector always trains (llava.py never freezes it).
  if (s.mode == TrainMode::kFull) {
    if (freeze_llm) s.freeze_patterns.push_back("language_model*");
  } else {
    s.train_patterns.push_back("*multi_modal_projector*");
  }
  if (const json* layer = Reader::at(model, "visual_select_layer"); layer != nullptr && *layer != json(-2)) {
    return r.fail("model.visual_select_layer", "-2 (the penultimate layer, as the LLaVA graphs take it)", *layer);
  }
  if (const json* depth = Reader::at(model, "projector_depth"); depth != nullptr && *depth != json(2)) {
    return r.fail("model.projector_depth", "2 (the LLaVA graphs' two-layer projector)", *depth);
  }
  if (const json* merge = Reader::at(model, "token_merge_ratio"); merge != nullptr && *merge != json(1)) {
    return r.fail("model.token_merge_ratio", "1 (merged image tokens are not modelled)", *merge);
  }
  return Status::ok();
}

// The model's training switches, then its keys not read.
void read_model_switches(Reader& r, const json& model, RunSettings& s) {
  // use_activation_checkpointing defaults to True in both models: every block of
  // the LLM (and the tower and projector) recomputes.
  const json* checkpointing = Reader::at(model, "use_activation_checkpointing");
  s.checkpointing = checkpointing == nullptr || is_true(checkpointing) ? CheckpointPolicy::kEveryBlock
                                                                        : CheckpointPolicy::kNone;
  if (is_true(Reader::at(model, "use_varlen_attn"))) {
    r.note("model.use_varlen_attn: attention stays inside each packed sample; priced as one causal sequence per row "
           "(the same saved tensors, the most attention work)");
  }
  r.rest(model, "model", {"type", "llm", "lora", "llm_lora", "visual_encoder", "visual_encoder_lora", "freeze_llm",
                          "freeze_visual_encoder", "use_activation_checkpointing", "use_varlen_attn",
                          "visual_select_layer", "projector_depth", "token_merge_ratio", "pretrained_pth",
                          "tokenizer", "image_processor", "template", "max_position_embeddings", "peft_model"});
}

// Batch and sequence (train_dataloader; the dataset's max_length and packing).
Status read_sequence(Reader& r, const json& cfg, bool llava, RunSettings& s) {
  Result<const json*> loader = read_train_batch(r, cfg, s);
  if (!loader.is_ok()) return loader.status();
  const json* dataset = Reader::at(*loader.value(), "dataset");
  const json* max_length = dataset != nullptr ? Reader::at(*dataset, "max_length") : nullptr;
  if (max_length == nullptr || !max_length->is_number_integer() || max_length->get<int64_t>() < 2) {
    return r.fail("train_dataloader.dataset.max_length", "the token cap of a sample (an integer)",
                  dataset != nullptr ? dataset->value("max_length", json()) : json());
  }
  const int64_t cap = max_length->get<int64_t>();
  if (llava) {
    // LLaVADataset cuts the text, with its one image placeholder, to max_length;
    // the tower's features then replace the placeholder (prepare_inputs_labels_for_multimodal).
    s.seq_len = cap - 1 + kLlavaImageTokens;
    s.shortest_sample = kLlavaImageTokens;  // the image and its placeholder alone
    r.note("sequence " + std::to_string(s.seq_len) + ": max_length " + std::to_string(cap) +
           " text tokens with one image placeholder, replaced by 576 image tokens (CLIP ViT-L/14 at 336 px; a tower "
           "of another grid needs --seq); samples are not packed, so a batch is as long as its longest sample, "
           "priced at the cap" + padded_batches_band("the 576 image tokens"));
  } else {
    s.seq_len = cap;
    // process_hf_dataset packs to max_length unless told not to (xtuner/dataset/huggingface.py).
    const json* pack = Reader::at(*dataset, "pack_to_max_length");
    if (pack != nullptr && *pack == json(false)) {
      s.shortest_sample = 1;  // the dataset's lengths are not in the config
      r.note("pack_to_max_length false: a batch is as long as its longest sample, priced at max_length " +
             std::to_string(cap) + padded_batches_band("1 token"));
    }
  }
  return Status::ok();
}

// xtuner/tools/train.py hands the run to DeepSpeed: MMEngine's batch and
// accumulation win over the DeepSpeed file's, and "auto" bf16 is on wherever
// torch says the GPU supports it (tools/utils.py auto_dtype_of_deepspeed_config),
// every GPU headroom knows. The engine then casts the whole model to bf16
// (deepspeed/runtime/engine.py _configure_distributed_model: module.bfloat16()),
// PEFT's fp32 copies included; fp32 masters live with the optimizer.
void run_under_deepspeed(Reader& r, RunSettings& s) {
  s.precision = Precision::kBf16Mixed;
  s.stack = Stack::kDeepspeed;
  r.note("--deepspeed: DeepSpeed casts the model to bf16 and keeps fp32 master weights (its bf16 \"auto\" is on "
         "for every GPU headroom knows); the DeepSpeed file's ZeRO stage and offload are read by --deepspeed");
}

// MMEngine's AmpOptimWrapper: torch.autocast around forward and loss, over
// the model as loaded (amp_optimizer_wrapper.py; dtype None is fp16 on CUDA;
// float32 autocasts to fp32, which is no 16-bit compute).
Status run_under_optim_wrapper(Reader& r, const OptimWrapperConfig& wrapper, const XtunerModel& m, RunSettings& s) {
  const bool bf16 = wrapper.bf16;
  const bool amp = wrapper.type == "AmpOptimWrapper" && !wrapper.autocast_fp32;
  if (m.llava && (m.llm_fp32 != m.vision_fp32)) {
    return r.fail("model.visual_encoder.torch_dtype",
                  "the LLM's weight dtype: without --deepspeed the vision tower and projector keep the dtype "
                  "they load in (fp32 without torch_dtype) and PEFT's k-bit preparation makes the LLM fp32 around "
                  "its 4-bit linears; a model of mixed weight dtypes is not modelled (give the run's --deepspeed "
                  "config, which casts everything to bf16)");
  }
  if (m.llm_fp32) {
    s.precision = amp ? (bf16 ? Precision::kBf16Amp : Precision::kFp16Amp) : Precision::kFp32;
  } else {
    // 16-bit weights trained as they are, autocast or not: weights, gradients
    // and AdamW states all 16-bit (fp16 priced as bf16, the same bytes).
    s.precision = Precision::kBf16Pure;
    if (*m.language.dtype == Dtype::kFp16) r.note("model.llm.torch_dtype float16: priced as bf16 (the same bytes)");
  }
  s.stack = Stack::kTorchAmp;
  s.optimizer_impl = wrapper.impl;  // foreach, torch.optim's default on CUDA, unless the optimizer says
  if (m.adapters && m.language.quantized) {
    r.note("PEFT's prepare_model_for_kbit_training leaves the embeddings, norms and output layer in fp32 around "
           "the 4-bit linears: priced as " + std::string(amp ? "autocast over an fp32 model" : "an fp32 model"));
  }
  return Status::ok();
}

// Checkpoints (the CheckpointHook) and, without DeepSpeed, the Runner's model
// wrapper; with --deepspeed xtuner's FlexibleRunner shards, not the wrapper.
// Then the top-level keys.
Status read_runner(Reader& r, const json& cfg, bool with_deepspeed, RunSettings& s) {
  read_checkpoint_hook(r, cfg, s);
  if (!with_deepspeed) {
    if (Status read = read_model_wrapper(r, cfg, s); !read.is_ok()) return read;
  }
  if (const json* parallel = Reader::at(cfg, "sequence_parallel_size"); parallel != nullptr && *parallel != json(1)) {
    return r.fail("sequence_parallel_size", "1 (sequence parallelism is not modelled)", *parallel);
  }
  if (Reader::at(cfg, "strategy") != nullptr) {
    return r.fail("strategy", "none (give the DeepSpeed config with --deepspeed, as xtuner train --deepspeed does)",
                  cfg.at("strategy"));
  }
  // Top-level variables (max_length = 2048, lr = 2e-4) feed the dicts read above,
  // which carry their values; they are named apart from the dicts not read.
  std::set<std::string> read = {"model", "train_dataloader", "optim_wrapper", "default_hooks",
                                "sequence_parallel_size", "strategy"};
  if (!with_deepspeed) read.insert("model_wrapper_cfg");
  list_unread_top_level(r, cfg, read);
  return Status::ok();
}

}  // namespace

Result<ConfigImport> import_xtuner_config(const json& dump, std::string_view origin, RunSettings base,
                                          bool with_deepspeed) {
  ConfigImport out;
  out.settings = std::move(base);
  RunSettings& s = out.settings;
  Reader r(origin, out);
  Result<const json*> config = mmengine_config_of(dump, origin);
  if (!config.is_ok()) return config.status();
  const json& cfg = *config.value();

  XtunerModel m;
  Result<const json*> model = read_model_type(r, cfg, m);
  if (!model.is_ok()) return model.status();
  if (Status read = read_language_model(r, *model.value(), s, m); !read.is_ok()) return read;
  if (m.llava) {
    if (Status read = read_llava_parts(r, *model.value(), s, m); !read.is_ok()) return read;
  }
  read_model_switches(r, *model.value(), s);
  if (Status read = read_sequence(r, cfg, m.llava, s); !read.is_ok()) return read;

  // The optimizer wrapper: AMP, accumulation and the optimizer (shared by every
  // MMEngine config: planner/configs/mmengine_config.h).
  Result<OptimWrapperConfig> wrapper = read_optim_wrapper(r, cfg, s);
  if (!wrapper.is_ok()) return wrapper.status();
  // Precision and who runs the step.
  if (with_deepspeed || wrapper->type == "DeepSpeedOptimWrapper") {
    run_under_deepspeed(r, s);
  } else if (Status run = run_under_optim_wrapper(r, wrapper.value(), m, s); !run.is_ok()) {
    return run;
  }
  // The loss: LLaVAModel / SupervisedFinetune return only outputs.loss, so the
  // model output (and its logits) is dropped before backward.
  s.loss = LossSpec{LossImpl::kFull, 8};
  if (Status read = read_runner(r, cfg, with_deepspeed, s); !read.is_ok()) return read;
  return out;
}

}  // namespace headroom::planner
