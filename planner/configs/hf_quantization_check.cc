#include "planner/configs/hf_quantization_check.h"

namespace headroom::planner {

Status check_hf_quantization(const RunSettings& settings, const std::optional<models::HfQuantization>& quantization,
                             const std::string& config_path) {
  if (!quantization) return Status::ok();
  const models::HfQuantization& q = *quantization;
  const std::string field = config_path + ": quantization_config: ";
  if (q.method == "gptq") {
    if (q.bits != 4) {
      return Status::unsupported(field + "a " + std::to_string(q.bits) +
                                 "-bit GPTQ model; only 4-bit GPTQ bases are modelled");
    }
    const std::string flags = "--qlora --quant gptq --gptq-group-size " + std::to_string(q.group_size);
    if (settings.mode != TrainMode::kQlora || settings.quant != QuantFormat::kGptq ||
        settings.gptq_group_size != q.group_size) {
      return Status::invalid_input(field + "a 4-bit GPTQ model (group_size " +
                                   std::to_string(q.group_size) +
                                   ") trains adapters on its frozen int4 base: expected mode "
                                   "qlora, quant gptq, gptq_group_size " +
                                   std::to_string(q.group_size) + " (" + flags + ")");
    }
    return Status::ok();
  }
  if (q.method == "bitsandbytes") {
    if (q.bits != 4) {
      return Status::unsupported(field +
                                 (q.bits == 8 ? "an 8-bit (LLM.int8) bitsandbytes model"
                                              : "a bitsandbytes config without load_in_4bit") +
                                 "; only 4-bit bitsandbytes bases are modelled");
    }
    const std::string flags = q.double_quant ? "--qlora" : "--qlora --no-double-quant";
    if (settings.mode != TrainMode::kQlora || settings.quant != QuantFormat::kNf4 ||
        settings.nf4_double_quant != q.double_quant) {
      return Status::invalid_input(field + "a bitsandbytes 4-bit model (" + q.quant_type +
                                   ", double quantization " + (q.double_quant ? "on" : "off") +
                                   ") trains adapters on its frozen base: expected mode qlora, "
                                   "quant nf4, nf4_double_quant " +
                                   (q.double_quant ? "true" : "false") + " (" + flags + ")");
    }
    return Status::ok();
  }
  return Status::unsupported(
      field + "quant_method '" + q.method +
      "' is not modelled (expected gptq or bitsandbytes 4-bit, or a 16-bit model)");
}

}  // namespace headroom::planner
