// A Hugging Face model's stored quantization (config.json's quantization_config)
// against the run: a quantized base trains adapters only, stored as the config
// says. Priced otherwise, a LoRA run over a GPTQ checkpoint would count a 16-bit
// base it does not have.
#pragma once

#include <optional>
#include <string>

#include "graph/status.h"
#include "models/hf_quantization.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// ok when `quantization` is absent or the settings store the base the same way:
// a 4-bit GPTQ model as mode qlora, quant gptq, its group size; a bitsandbytes
// 4-bit model as mode qlora, quant nf4 (FP4 packs the same bytes), its double
// quantization. Otherwise an error naming `config_path`'s field and the flags
// that price it; 8-bit bases and other methods are refused as not modelled.
Status check_hf_quantization(const RunSettings& settings, const std::optional<models::HfQuantization>& quantization,
                             const std::string& config_path);

}  // namespace headroom::planner
