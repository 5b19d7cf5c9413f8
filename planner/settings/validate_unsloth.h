// Unsloth as its source at 2026.8.19 (unsloth_zoo 2026.8.13) runs it: what headroom
// models, and each combination it does not, refused by name (docs/stacks.md, "Unsloth").
#pragma once

#include <string_view>

#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Under stack unsloth: LoRA or QLoRA over bitsandbytes NF4, one GPU without ZeRO, bf16
// weights, supervised training, SDPA-style attention, no torch.compile, fp8 or
// torchtune-style input offload. Other stacks: nothing checked.
Status check_unsloth(const RunSettings& settings, std::string_view origin);

// The model families whose fast paths headroom prices for Unsloth (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM: unsloth/models/llama.py, mistral.py, qwen2.py);
// `family` is the config's model_type. Returns an error naming what is missing, or ok.
Status check_unsloth_family(std::string_view family, std::string_view model);

}  // namespace headroom::planner
