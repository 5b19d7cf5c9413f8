// Reading a torchtune recipe config (the YAML given to `tune run RECIPE --config
// FILE`, with its `key=value` command-line overrides) into RunSettings, so
// `headroom fit --torchtune FILE` answers for the run as the user launches it.
// Rules, key by key, in docs/config-import.md ("torchtune recipe configs").
//
// - Read: model (_component_ and the LoRA keys), tokenizer.max_seq_len,
//   dataset.packed, batch_size, gradient_accumulation_steps, optimizer
//   (_component_, fused, foreach), optimizer_in_bwd, loss (_component_,
//   num_output_chunks), compile, enable_activation_checkpointing,
//   enable_activation_offloading, dtype, device, and the FSDP keys of the
//   distributed recipes (fsdp_cpu_offload, fsdp_reshard_after_forward).
// - Every other key is listed in `ignored` (never silently dropped).
// - What the config cannot say (the GPU, the GPU count) comes from `base`; the
//   stack is torchtune.
// - Refused by name: an unknown model builder or optimizer, fp16 (torchtune
//   refuses it), a device other than cuda, DoRA, keys of the wrong type,
//   duplicate keys, an override that is not KEY=VALUE.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

struct TorchtuneImport {
  RunSettings settings;
  std::vector<std::string> ignored;  // key paths read as having no effect on memory or time
  std::vector<std::string> notes;    // what was assumed where the config leaves a choice open
  // tokenizer.max_seq_len is null and the dataset is not packed: batches are
  // padded to their longest sample, which the config does not know (--seq says).
  bool sequence_unknown = false;
};

// Parses `text` (YAML) from `origin`, applies the `overrides` ("optimizer.fused=True",
// OmegaConf dot-list style) and maps the result onto `base`. sequence_unknown:
// tokenizer.max_seq_len is null and the dataset is not packed.
Result<ConfigImport> import_torchtune_config(std::string_view text, std::string_view origin,
                                                const std::vector<std::string>& overrides, RunSettings base);

// Reads PATH and imports it.
Result<ConfigImport> load_torchtune_config(const std::string& path, const std::vector<std::string>& overrides,
                                              RunSettings base);

}  // namespace headroom::planner
