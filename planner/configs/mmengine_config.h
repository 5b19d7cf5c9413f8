// The parts every MMEngine training config shares, whichever OpenMMLab project
// (XTuner, mmpretrain) builds the model: the dump MMEngine's own loader prints
// (scripts/exporter/read_mmengine_config.py), the optimizer wrapper (AMP,
// accumulation, the optimizer), the training data loader's batch, the model
// wrapper the Runner puts around the model, and the checkpoint hook. The
// project readers (planner/configs/xtuner_import.h, planner/configs/mmpretrain_import.h) read
// the model with these. Rules in docs/config-import.md ("MMEngine configs").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// One MMEngine config being read: field errors name the file and the dotted
// key, and every key of a dict that is read but not understood joins the
// import's `ignored`.
class MmengineReader {
 public:
  MmengineReader(std::string_view origin, ConfigImport& out) : origin_(origin), out_(out) {}

  // The value at `key` of `obj`, or nullptr when absent or None.
  static const nlohmann::json* at(const nlohmann::json& obj, const char* key);
  Status fail(const std::string& path, const std::string& expected, const nlohmann::json& got = nullptr) const;
  // Keys of `obj` outside `read`, listed as not read under `path`.
  void rest(const nlohmann::json& obj, const std::string& path, std::initializer_list<const char*> read);
  void note(const std::string& text) { out_.notes.push_back(text); }
  ConfigImport& out() { return out_; }
  std::string_view origin() const { return origin_; }

 private:
  std::string_view origin_;
  ConfigImport& out_;
};

// An imported object as the loader prints it ({"import": "torch.float16"}), or a
// class named by a string (MMEngine's registry form, type='LLaVAModel').
std::optional<std::string> import_name(const nlohmann::json* value);
// The last dotted component: "xtuner.model.LLaVAModel" -> "LLaVAModel".
std::string last_name(const std::string& dotted);
bool is_true(const nlohmann::json* value);

// The `config` object of what read_mmengine_config.py prints, or the error
// naming `origin` when `dump` is something else.
Result<const nlohmann::json*> mmengine_config_of(const nlohmann::json& dump, std::string_view origin);

// The last name of `model.type` ("ImageClassifier", "SupervisedFinetune"); ""
// when the config has no model dict or no type.
std::string mmengine_model_type(const nlohmann::json& cfg);

// What `optim_wrapper` says (mmengine/optim/optimizer/*.py). `type` absent is
// OptimWrapper, as DefaultOptimWrapperConstructor sets it.
struct OptimWrapperConfig {
  std::string type;          // OptimWrapper, AmpOptimWrapper or DeepSpeedOptimWrapper
  bool bf16 = false;         // AmpOptimWrapper dtype bfloat16 (None and float16: fp16)
  bool autocast_fp32 = false;  // AmpOptimWrapper dtype float32: autocast to fp32, no 16-bit compute
  // torch.optim's implementation from the optimizer's own keys: fused=True,
  // foreach=False, else foreach (its CUDA default).
  OptimizerImpl impl = OptimizerImpl::kForeach;
};

// Reads `optim_wrapper`: the wrapper type and AMP dtype into the result; the
// accumulation (accumulative_counts, 1 when absent), the optimizer
// (torch.optim AdamW / Adam, SGD with momentum; bitsandbytes AdamW8bit,
// PagedAdamW8bit, PagedAdamW) and its paging into `s`. Others are refused.
Result<OptimWrapperConfig> read_optim_wrapper(MmengineReader& r, const nlohmann::json& cfg, RunSettings& s);

// train_dataloader.batch_size: the micro-batch (per GPU, as MMEngine's Runner
// builds one DataLoader per process). Returns the loader dict.
Result<const nlohmann::json*> read_train_batch(MmengineReader& r, const nlohmann::json& cfg, RunSettings& s);

// model_wrapper_cfg (Runner.wrap_model): absent or MMDistributedDataParallel is
// DDP, every GPU holding everything; MMFullyShardedDataParallel is FSDP1 at
// FULL_SHARD with the whole model one FlatParameter (no auto_wrap_policy) and
// its cpu_offload FSDP1's CPUOffload. A wrap policy, MixedPrecision and
// accumulation under it (no_sync) are refused by name.
Status read_model_wrapper(MmengineReader& r, const nlohmann::json& cfg, RunSettings& s);

// default_hooks.checkpoint (CheckpointHook): max_keep_ckpts (-1, its default,
// keeps all: a note) and save_optimizer.
void read_checkpoint_hook(MmengineReader& r, const nlohmann::json& cfg, RunSettings& s);

// The top-level keys outside `read`: dicts and lists of dicts are listed as not
// read; scalars and plain lists (variables such as lr = 2e-4, which feed the
// dicts read and whose values those carry) are named together in one note.
void list_unread_top_level(MmengineReader& r, const nlohmann::json& cfg, const std::set<std::string>& read);

}  // namespace headroom::planner
