#include "planner/settings/stack_choices.h"

#include <charconv>

#include "planner/settings/choice_table.h"

namespace headroom::planner {
namespace {

constexpr ChoiceTable<Stack, 9> kStacks = {{{
    {Stack::kHfTrainer, "hf-trainer"},
    {Stack::kTorchtune, "torchtune"},
    {Stack::kLitgpt, "litgpt"},
    {Stack::kTorchtitan, "torchtitan"},
    {Stack::kDeepspeed, "deepspeed"},
    {Stack::kTorchAmp, "torch-amp"},
    {Stack::kComposer, "composer"},
    {Stack::kUnsloth, "unsloth"},
    {Stack::kUnspecified, "unspecified"},
}}};
constexpr ChoiceTable<OptimizerImpl, 4> kImpls = {{{
    {OptimizerImpl::kForeach, "foreach"},
    {OptimizerImpl::kFused, "fused"},
    {OptimizerImpl::kForLoop, "for-loop"},
    {OptimizerImpl::kInBackward, "in-backward"},
}}};
// The chunked loss is named with its chunk count ("chunked:8"), "chunked" alone meaning 8.
constexpr ChoiceTable<LossImpl, 13> kLosses = {{{
    {LossImpl::kFullKeepLogits, "full-keep-logits"},
    {LossImpl::kFull, "full"},
    {LossImpl::kChunked, "chunked"},
    {LossImpl::kNoUpcast, "no-upcast"},
    {LossImpl::kShiftCopy, "shift-copy"},
    {LossImpl::kUpcastShift, "upcast-shift"},
    {LossImpl::kFusedXentropy, "fused-xentropy"},
    {LossImpl::kFusedLinearCe, "fused-linear-ce"},
    {LossImpl::kLitgptFull, "litgpt-full"},
    {LossImpl::kLitgptLora, "litgpt-lora"},
    {LossImpl::kTrlFusedHead, "trl-fused-head"},
    {LossImpl::kUnslothFusedCe, "unsloth-fused-ce"},
    {LossImpl::kUnslothFusedCeEager, "unsloth-fused-ce-eager"},
}}};
constexpr int kDefaultLossChunks = 8;  // torchtune's num_output_chunks
constexpr ChoiceTable<Recompute, 3> kRecomputes = {{{
    {Recompute::kBlock, "block"},
    {Recompute::kBlockReentrant, "block-reentrant"},
    {Recompute::kSelectiveOp, "selective-op"},
}}};
constexpr ChoiceTable<AdapterDtype, 2> kAdapterDtypes = {{{
    {AdapterDtype::kFp32, "fp32"},
    {AdapterDtype::kModel, "model"},
}}};
constexpr ChoiceTable<Sharding, 3> kShardings = {{{
    {Sharding::kDeepspeed, "deepspeed"},
    {Sharding::kFsdp1, "fsdp1"},
    {Sharding::kFsdp2, "fsdp2"},
}}};
constexpr ChoiceTable<ReduceDtype, 2> kReduceDtypes = {{{
    {ReduceDtype::kFp32, "fp32"},
    {ReduceDtype::kParam, "param"},
}}};
constexpr ChoiceTable<FsdpWrap, 2> kFsdpWraps = {{{
    {FsdpWrap::kLayers, "layers"},
    {FsdpWrap::kModel, "model"},
}}};
constexpr ChoiceTable<KbitPrep, 3> kKbitPreps = {{{
    {KbitPrep::kNone, "none"},
    {KbitPrep::kNormsFp32, "norms-fp32"},
    {KbitPrep::kPeft, "peft"},
}}};
constexpr ChoiceTable<Recipe, 4> kRecipes = {{{
    {Recipe::kSupervised, "supervised"},
    {Recipe::kDpo, "dpo"},
    {Recipe::kReward, "reward"},
    {Recipe::kGrpo, "grpo"},
}}};
constexpr ChoiceTable<Reference, 4> kReferences = {{{
    {Reference::kCopy, "copy"},
    {Reference::kAdapterDisabled, "adapter-disabled"},
    {Reference::kPrecomputed, "precomputed"},
    {Reference::kNone, "none"},
}}};
constexpr ChoiceTable<Generation, 4> kGenerations = {{{
    {Generation::kGenerate, "generate"},
    {Generation::kVllmColocate, "vllm-colocate"},
    {Generation::kVllmColocateSleep, "vllm-colocate-sleep"},
    {Generation::kVllmServer, "vllm-server"},
}}};

}  // namespace

std::string_view stack_name(Stack value) { return kStacks.name(value); }
std::optional<Stack> parse_stack(std::string_view text) { return kStacks.parse(text); }
std::string stack_names() { return kStacks.names(); }

std::string_view optimizer_impl_name(OptimizerImpl value) { return kImpls.name(value); }
std::optional<OptimizerImpl> parse_optimizer_impl(std::string_view text) { return kImpls.parse(text); }
std::string optimizer_impl_names() { return kImpls.names(); }

std::string loss_name(const LossSpec& value) {
  if (value.impl == LossImpl::kChunked) return "chunked:" + std::to_string(value.chunks);
  return std::string(kLosses.name(value.impl));
}

std::optional<LossSpec> parse_loss(std::string_view text) {
  if (text.starts_with("chunked:")) {
    const std::string_view digits = text.substr(8);
    int chunks = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), chunks);
    if (error != std::errc() || end != digits.data() + digits.size() || chunks < 1 || chunks > 4096) {
      return std::nullopt;
    }
    return LossSpec{LossImpl::kChunked, chunks};
  }
  const std::optional<LossImpl> impl = kLosses.parse(text);
  if (!impl) return std::nullopt;
  return LossSpec{*impl, kDefaultLossChunks};
}

std::string loss_names() {
  std::string names = kLosses.names();
  names.replace(names.find("chunked"), 7, "chunked[:N]");
  return names;
}

std::string_view recompute_name(Recompute value) { return kRecomputes.name(value); }
std::optional<Recompute> parse_recompute(std::string_view text) { return kRecomputes.parse(text); }
std::string recompute_names() { return kRecomputes.names(); }

std::string_view adapter_dtype_name(AdapterDtype value) { return kAdapterDtypes.name(value); }
std::optional<AdapterDtype> parse_adapter_dtype(std::string_view text) { return kAdapterDtypes.parse(text); }
std::string adapter_dtype_names() { return kAdapterDtypes.names(); }

std::string_view sharding_name(Sharding value) { return kShardings.name(value); }
std::optional<Sharding> parse_sharding(std::string_view text) { return kShardings.parse(text); }
std::string sharding_names() { return kShardings.names(); }

std::string_view reduce_dtype_name(ReduceDtype value) { return kReduceDtypes.name(value); }
std::optional<ReduceDtype> parse_reduce_dtype(std::string_view text) { return kReduceDtypes.parse(text); }
std::string reduce_dtype_names() { return kReduceDtypes.names(); }

std::string_view fsdp_wrap_name(FsdpWrap value) { return kFsdpWraps.name(value); }
std::optional<FsdpWrap> parse_fsdp_wrap(std::string_view text) { return kFsdpWraps.parse(text); }
std::string fsdp_wrap_names() { return kFsdpWraps.names(); }

std::string_view kbit_prep_name(KbitPrep value) { return kKbitPreps.name(value); }
std::optional<KbitPrep> parse_kbit_prep(std::string_view text) { return kKbitPreps.parse(text); }
std::string kbit_prep_names() { return kKbitPreps.names(); }

std::string_view recipe_name(Recipe value) { return kRecipes.name(value); }
std::optional<Recipe> parse_recipe(std::string_view text) { return kRecipes.parse(text); }
std::string recipe_names() { return kRecipes.names(); }

std::string_view reference_name(Reference value) { return kReferences.name(value); }
std::optional<Reference> parse_reference(std::string_view text) { return kReferences.parse(text); }
std::string reference_names() { return kReferences.names(); }

std::string_view generation_name(Generation value) { return kGenerations.name(value); }
std::optional<Generation> parse_generation(std::string_view text) { return kGenerations.parse(text); }
std::string generation_names() { return kGenerations.names(); }

}  // namespace headroom::planner
