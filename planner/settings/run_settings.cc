#include "planner/settings/run_settings.h"

#include <string>

#include "planner/settings/choice_table.h"

namespace headroom::planner {
namespace {

constexpr ChoiceTable<Precision, 6> kPrecisions = {{{
    {Precision::kFp32, "fp32"},
    {Precision::kBf16Mixed, "bf16-mixed"},
    {Precision::kFp16Mixed, "fp16-mixed"},
    {Precision::kBf16Pure, "bf16"},
    {Precision::kBf16Amp, "bf16-amp"},
    {Precision::kFp16Amp, "fp16-amp"},
}}};
constexpr ChoiceTable<OptimizerKind, 7> kOptimizers = {{{
    {OptimizerKind::kAdamW, "adamw"},
    {OptimizerKind::kAdamW8bit, "adamw-8bit"},
    {OptimizerKind::kAdamW4bit, "adamw-4bit"},
    {OptimizerKind::kAdamW8bitTorchao, "adamw-8bit-torchao"},
    {OptimizerKind::kSgdMomentum, "sgd"},
    {OptimizerKind::kSgd, "sgd-no-momentum"},
    {OptimizerKind::kAdafactor, "adafactor"},
}}};
constexpr ChoiceTable<TrainMode, 3> kModes = {{{
    {TrainMode::kFull, "full"},
    {TrainMode::kLora, "lora"},
    {TrainMode::kQlora, "qlora"},
}}};
constexpr ChoiceTable<Offload, 3> kOffloads = {{{
    {Offload::kNone, "none"},
    {Offload::kCpu, "cpu"},
    {Offload::kNvme, "nvme"},
}}};
constexpr ChoiceTable<models::AttentionImpl, 4> kAttentions = {{{
    {models::AttentionImpl::kEager, "eager"},
    {models::AttentionImpl::kSdpa, "sdpa"},
    {models::AttentionImpl::kFlex, "flex"},
    {models::AttentionImpl::kTritonFlash, "triton"},
}}};
constexpr ChoiceTable<CpuOffloadImpl, 3> kCpuOffloads = {{{
    {CpuOffloadImpl::kZeroOffload, "zero-offload"},
    {CpuOffloadImpl::kTorchao, "torchao"},
    {CpuOffloadImpl::kTorchaoGradients, "torchao-offload-gradients"},
}}};
constexpr ChoiceTable<BlockChoice, 3> kChoices = {{{
    {BlockChoice::kKeep, "keep"},
    {BlockChoice::kCheckpoint, "checkpoint"},
    {BlockChoice::kOffload, "offload"},
}}};

}  // namespace

std::string_view precision_name(Precision value) { return kPrecisions.name(value); }
std::string_view optimizer_name(OptimizerKind value) { return kOptimizers.name(value); }
std::string_view mode_name(TrainMode value) { return kModes.name(value); }
std::string_view offload_name(Offload value) { return kOffloads.name(value); }
std::string_view block_choice_name(BlockChoice value) { return kChoices.name(value); }
std::optional<Precision> parse_precision(std::string_view text) { return kPrecisions.parse(text); }
std::optional<OptimizerKind> parse_optimizer(std::string_view text) { return kOptimizers.parse(text); }
std::optional<TrainMode> parse_mode(std::string_view text) { return kModes.parse(text); }
std::optional<Offload> parse_offload(std::string_view text) { return kOffloads.parse(text); }
std::optional<BlockChoice> parse_block_choice(std::string_view text) { return kChoices.parse(text); }
std::string_view cpu_offload_name(CpuOffloadImpl value) { return kCpuOffloads.name(value); }
std::string_view attention_name(models::AttentionImpl value) { return kAttentions.name(value); }
std::optional<models::AttentionImpl> parse_attention(std::string_view text) { return kAttentions.parse(text); }
std::optional<CpuOffloadImpl> parse_cpu_offload(std::string_view text) { return kCpuOffloads.parse(text); }

std::string precision_names() { return kPrecisions.names(); }
std::string optimizer_names() { return kOptimizers.names(); }
std::string mode_names() { return kModes.names(); }
std::string offload_names() { return kOffloads.names(); }
std::string attention_names() { return kAttentions.names(); }
std::string cpu_offload_names() { return kCpuOffloads.names(); }

}  // namespace headroom::planner
