// Reading a transformers Trainer run into RunSettings: its TrainingArguments
// (the JSON `TrainingArguments.to_json_string()` writes, or the `--key value`
// command line HfArgumentParser reads; TRL's SFTConfig keys too; PEFT's
// adapter_config.json is configs/peft_import.h). Rules, key by key, in
// docs/config-import.md.
//
// TrainingArguments read: per_device_train_batch_size, gradient_accumulation_steps,
// bf16, fp16, optim, gradient_checkpointing (activation_checkpointing in 5.x),
// torch_compile, deepspeed (a path or an object, applied as --deepspeed with
// "auto" filled from these arguments), fsdp, save_total_limit, save_only_model,
// use_cpu / no_cuda; SFTConfig's max_seq_length / max_length and packing. Every
// other key is listed in `ignored`. The model and, without SFTConfig keys, the
// sequence length are not in the arguments: MODEL and --seq give them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// `text` is a JSON object (to_json_string) or command-line arguments
// ("--per_device_train_batch_size 4 --bf16 ..."; a leading script path and
// newlines are allowed). The stack becomes hf-trainer.
Result<ConfigImport> import_training_arguments(std::string_view text, std::string_view origin, RunSettings base);
Result<ConfigImport> load_training_arguments(const std::string& path, RunSettings base);
// The same from arguments already parsed into a JSON object (native or string
// values), for configs that are TrainingArguments under other names (axolotl).
Result<ConfigImport> import_training_arguments_object(const nlohmann::json& args, std::string_view origin,
                                                      RunSettings base);

// A PEFT adapter_config.json: LoRA on top of `base` (qlora stays qlora).

}  // namespace headroom::planner
