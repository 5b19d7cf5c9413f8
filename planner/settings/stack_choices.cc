#include "planner/settings/stack_choices.h"

#include <array>
#include <charconv>
#include <utility>

namespace headroom::planner {
namespace {

constexpr std::array<std::pair<Stack, std::string_view>, 8> kStackNamesTable = {{
    {Stack::kUnspecified, "unspecified"},
    {Stack::kHfTrainer, "hf-trainer"},
    {Stack::kTorchtune, "torchtune"},
    {Stack::kLitgpt, "litgpt"},
    {Stack::kTorchtitan, "torchtitan"},
    {Stack::kDeepspeed, "deepspeed"},
    {Stack::kTorchAmp, "torch-amp"},
    {Stack::kComposer, "composer"},
}};

constexpr std::array<std::pair<OptimizerImpl, std::string_view>, 4> kImpls = {{
    {OptimizerImpl::kForeach, "foreach"},
    {OptimizerImpl::kFused, "fused"},
    {OptimizerImpl::kForLoop, "for-loop"},
    {OptimizerImpl::kInBackward, "in-backward"},
}};

}  // namespace

std::string_view sharding_name(Sharding value) {
  switch (value) {
    case Sharding::kDeepspeed: return "deepspeed";
    case Sharding::kFsdp1: return "fsdp1";
    case Sharding::kFsdp2: return "fsdp2";
  }
  return "?";
}

std::string_view fsdp_wrap_name(FsdpWrap value) { return value == FsdpWrap::kModel ? "model" : "layers"; }

std::optional<FsdpWrap> parse_fsdp_wrap(std::string_view text) {
  if (text == "layers") return FsdpWrap::kLayers;
  if (text == "model") return FsdpWrap::kModel;
  return std::nullopt;
}

std::string_view reduce_dtype_name(ReduceDtype value) { return value == ReduceDtype::kFp32 ? "fp32" : "param"; }

std::optional<ReduceDtype> parse_reduce_dtype(std::string_view text) {
  if (text == "fp32") return ReduceDtype::kFp32;
  if (text == "param") return ReduceDtype::kParam;
  return std::nullopt;
}

std::optional<Stack> parse_stack(std::string_view text) {
  for (const auto& [stack, name] : kStackNamesTable) {
    if (name == text) return stack;
  }
  return std::nullopt;
}

std::string_view optimizer_impl_name(OptimizerImpl value) {
  for (const auto& [impl, name] : kImpls) {
    if (impl == value) return name;
  }
  return "?";
}

std::optional<OptimizerImpl> parse_optimizer_impl(std::string_view text) {
  for (const auto& [impl, name] : kImpls) {
    if (name == text) return impl;
  }
  return std::nullopt;
}

std::string loss_name(const LossSpec& value) {
  switch (value.impl) {
    case LossImpl::kFullKeepLogits: return "full-keep-logits";
    case LossImpl::kFull: return "full";
    case LossImpl::kChunked: return "chunked:" + std::to_string(value.chunks);
    case LossImpl::kNoUpcast: return "no-upcast";
    case LossImpl::kShiftCopy: return "shift-copy";
    case LossImpl::kFusedXentropy: return "fused-xentropy";
    case LossImpl::kFusedLinearCe: return "fused-linear-ce";
  }
  return "?";
}

std::optional<LossSpec> parse_loss(std::string_view text) {
  if (text == "full-keep-logits") return LossSpec{LossImpl::kFullKeepLogits, 8};
  if (text == "full") return LossSpec{LossImpl::kFull, 8};
  if (text == "no-upcast") return LossSpec{LossImpl::kNoUpcast, 8};
  if (text == "shift-copy") return LossSpec{LossImpl::kShiftCopy, 8};
  if (text == "fused-xentropy") return LossSpec{LossImpl::kFusedXentropy, 8};
  if (text == "fused-linear-ce") return LossSpec{LossImpl::kFusedLinearCe, 8};
  if (text == "chunked") return LossSpec{LossImpl::kChunked, 8};
  if (text.starts_with("chunked:")) {
    const std::string_view digits = text.substr(8);
    int chunks = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), chunks);
    if (error != std::errc() || end != digits.data() + digits.size() || chunks < 1 || chunks > 4096) {
      return std::nullopt;
    }
    return LossSpec{LossImpl::kChunked, chunks};
  }
  return std::nullopt;
}

std::string_view recompute_name(Recompute value) {
  return value == Recompute::kSelectiveOp ? "selective-op" : "block";
}

std::optional<Recompute> parse_recompute(std::string_view text) {
  if (text == "block") return Recompute::kBlock;
  if (text == "selective-op") return Recompute::kSelectiveOp;
  return std::nullopt;
}

std::string_view adapter_dtype_name(AdapterDtype value) { return value == AdapterDtype::kModel ? "model" : "fp32"; }

std::optional<AdapterDtype> parse_adapter_dtype(std::string_view text) {
  if (text == "fp32") return AdapterDtype::kFp32;
  if (text == "model") return AdapterDtype::kModel;
  return std::nullopt;
}

std::string_view kbit_prep_name(KbitPrep value) {
  switch (value) {
    case KbitPrep::kNone: return "none";
    case KbitPrep::kNormsFp32: return "norms-fp32";
    case KbitPrep::kPeft: return "peft";
  }
  return "?";
}

std::optional<KbitPrep> parse_kbit_prep(std::string_view text) {
  if (text == "none") return KbitPrep::kNone;
  if (text == "norms-fp32") return KbitPrep::kNormsFp32;
  if (text == "peft") return KbitPrep::kPeft;
  return std::nullopt;
}

std::optional<Sharding> parse_sharding(std::string_view text) {
  for (Sharding value : {Sharding::kDeepspeed, Sharding::kFsdp1, Sharding::kFsdp2}) {
    if (sharding_name(value) == text) return value;
  }
  return std::nullopt;
}

std::string_view stack_name(Stack value) {
  for (const auto& [stack, name] : kStackNamesTable) {
    if (stack == value) return name;
  }
  return "?";
}

}  // namespace headroom::planner
