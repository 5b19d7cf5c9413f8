#include "planner/settings/run_settings.h"

#include <array>

#include <string>
#include <utility>

namespace headroom::planner {
namespace {

template <typename E, size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (const auto& [key, name] : table) {
    if (key == value) return name;
  }
  return "?";
}

template <typename E, size_t N>
std::optional<E> parse_of(const std::array<std::pair<E, std::string_view>, N>& table,
                          std::string_view text) {
  for (const auto& [key, name] : table) {
    if (name == text) return key;
  }
  return std::nullopt;
}

constexpr std::array<std::pair<Precision, std::string_view>, 6> kPrecisions = {{
    {Precision::kFp32, "fp32"},
    {Precision::kBf16Mixed, "bf16-mixed"},
    {Precision::kFp16Mixed, "fp16-mixed"},
    {Precision::kBf16Pure, "bf16"},
    {Precision::kBf16Amp, "bf16-amp"},
    {Precision::kFp16Amp, "fp16-amp"},
}};
constexpr std::array<std::pair<OptimizerKind, std::string_view>, 5> kOptimizers = {{
    {OptimizerKind::kAdamW, "adamw"},
    {OptimizerKind::kAdamW8bit, "adamw-8bit"},
    {OptimizerKind::kAdamW4bit, "adamw-4bit"},
    {OptimizerKind::kSgdMomentum, "sgd"},
    {OptimizerKind::kAdafactor, "adafactor"},
}};
constexpr std::array<std::pair<TrainMode, std::string_view>, 3> kModes = {{
    {TrainMode::kFull, "full"},
    {TrainMode::kLora, "lora"},
    {TrainMode::kQlora, "qlora"},
}};
constexpr std::array<std::pair<Offload, std::string_view>, 3> kOffloads = {{
    {Offload::kNone, "none"},
    {Offload::kCpu, "cpu"},
    {Offload::kNvme, "nvme"},
}};
constexpr std::array<std::pair<models::AttentionImpl, std::string_view>, 4> kAttentions = {{
    {models::AttentionImpl::kEager, "eager"},
    {models::AttentionImpl::kSdpa, "sdpa"},
    {models::AttentionImpl::kFlex, "flex"},
    {models::AttentionImpl::kTritonFlash, "triton"},
}};
constexpr std::array<std::pair<CpuOffloadImpl, std::string_view>, 3> kCpuOffloads = {{
    {CpuOffloadImpl::kZeroOffload, "zero-offload"},
    {CpuOffloadImpl::kTorchao, "torchao"},
    {CpuOffloadImpl::kTorchaoGradients, "torchao-offload-gradients"},
}};
constexpr std::array<std::pair<BlockChoice, std::string_view>, 3> kChoices = {{
    {BlockChoice::kKeep, "keep"},
    {BlockChoice::kCheckpoint, "checkpoint"},
    {BlockChoice::kOffload, "offload"},
}};

}  // namespace

std::string_view precision_name(Precision value) { return name_of(kPrecisions, value); }
std::string_view optimizer_name(OptimizerKind value) { return name_of(kOptimizers, value); }
std::string_view mode_name(TrainMode value) { return name_of(kModes, value); }
std::string_view offload_name(Offload value) { return name_of(kOffloads, value); }
std::string_view block_choice_name(BlockChoice value) { return name_of(kChoices, value); }
std::optional<Precision> parse_precision(std::string_view text) { return parse_of(kPrecisions, text); }
std::optional<OptimizerKind> parse_optimizer(std::string_view text) { return parse_of(kOptimizers, text); }
std::optional<TrainMode> parse_mode(std::string_view text) { return parse_of(kModes, text); }
std::optional<Offload> parse_offload(std::string_view text) { return parse_of(kOffloads, text); }
std::optional<BlockChoice> parse_block_choice(std::string_view text) { return parse_of(kChoices, text); }
std::string_view cpu_offload_name(CpuOffloadImpl value) { return name_of(kCpuOffloads, value); }
std::string_view attention_name(models::AttentionImpl value) { return name_of(kAttentions, value); }
std::optional<models::AttentionImpl> parse_attention(std::string_view text) { return parse_of(kAttentions, text); }
std::optional<CpuOffloadImpl> parse_cpu_offload(std::string_view text) { return parse_of(kCpuOffloads, text); }

}  // namespace headroom::planner
