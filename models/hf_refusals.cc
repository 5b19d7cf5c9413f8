#include "models/hf_refusals.h"

#include <map>

namespace headroom::models {
namespace {

// State-space and recurrent language models: no attention, and a selective scan
// (Mamba's mamba_ssm / causal_conv1d CUDA kernels, or transformers' slow path, a Python
// loop over the sequence) whose saved tensors headroom's graph builders do not model;
// the exporter cannot trace that loop into a graph whose sizes follow the sequence.
constexpr const char* kStateSpace =
    "a state-space / recurrent model (no attention layers): its selective scan is not modelled by "
    "headroom and scripts/exporter cannot trace its per-token loop; write a layer-graph JSON "
    "(docs/layer-graph-format.md) to price it";

const std::map<std::string, std::string>& reasons() {
  static const std::map<std::string, std::string> kReasons = {
      {"mamba", std::string("mamba (MambaForCausalLM) is ") + kStateSpace},
      {"mamba2", std::string("mamba2 (Mamba2ForCausalLM) is ") + kStateSpace},
      {"falcon_mamba", std::string("falcon_mamba (FalconMambaForCausalLM) is ") + kStateSpace},
      {"rwkv", std::string("rwkv (RwkvForCausalLM) is ") + kStateSpace},
  };
  return kReasons;
}

}  // namespace

std::optional<std::string> unsupported_family_reason(const std::string& model_type) {
  const auto found = reasons().find(model_type);
  if (found == reasons().end()) return std::nullopt;
  return found->second;
}

}  // namespace headroom::models
