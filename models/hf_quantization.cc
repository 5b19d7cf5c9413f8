#include "models/hf_quantization.h"

namespace headroom::models {
namespace {

Status field_error(const std::string& origin, const std::string& field, const std::string& expected) {
  return Status::invalid_input(origin + ": quantization_config." + field + ": expected " +
                               expected);
}

}  // namespace

Result<std::optional<HfQuantization>> read_hf_quantization(const nlohmann::json& config, const std::string& origin) {
  if (!config.is_object() || !config.contains("quantization_config") || config.at("quantization_config").is_null()) {
    return std::optional<HfQuantization>{};
  }
  const nlohmann::json& q = config.at("quantization_config");
  if (!q.is_object())
    return Status::invalid_input(origin + ": quantization_config: expected an object");
  HfQuantization out;
  // transformers' QuantizationConfigMixin always writes quant_method; older GPTQ
  // exports (AutoGPTQ's quantize_config) name the bits and group size only.
  if (q.contains("quant_method")) {
    if (!q.at("quant_method").is_string()) return field_error(origin, "quant_method", "a string");
    out.method = q.at("quant_method").get<std::string>();
  } else if (q.contains("group_size")) {
    out.method = "gptq";
  }
  const auto integer = [&](const char* key, int64_t& value) -> Status {
    if (!q.contains(key) || q.at(key).is_null()) return Status::ok();
    if (!q.at(key).is_number_integer()) return field_error(origin, key, "an integer");
    value = q.at(key).get<int64_t>();
    return Status::ok();
  };
  const auto boolean = [&](const char* key, bool& value) -> Status {
    if (!q.contains(key) || q.at(key).is_null()) return Status::ok();
    if (!q.at(key).is_boolean()) return field_error(origin, key, "true or false");
    value = q.at(key).get<bool>();
    return Status::ok();
  };
  if (out.method == "gptq") {
    int64_t bits = 0;
    if (Status s = integer("bits", bits); !s.is_ok()) return s;
    if (Status s = integer("group_size", out.group_size); !s.is_ok()) return s;
    out.bits = static_cast<int>(bits);
  } else if (out.method == "bitsandbytes") {
    bool four = false, eight = false;
    if (Status s = boolean("load_in_4bit", four); !s.is_ok()) return s;
    if (Status s = boolean("load_in_8bit", eight); !s.is_ok()) return s;
    out.bits = four ? 4 : eight ? 8 : 0;
    if (Status s = boolean("bnb_4bit_use_double_quant", out.double_quant); !s.is_ok()) return s;
    if (q.contains("bnb_4bit_quant_type") && q.at("bnb_4bit_quant_type").is_string()) {
      out.quant_type = q.at("bnb_4bit_quant_type").get<std::string>();
    } else {
      out.quant_type = "fp4";  // BitsAndBytesConfig's default
    }
  }
  return std::optional<HfQuantization>{out};
}

}  // namespace headroom::models
