#include "planner/settings/bnb_release.h"

#include <optional>

#include "planner/settings/stack_traits.h"
#include "planner/settings/versions.h"

namespace headroom::planner {
namespace {

// bitsandbytes 0.43.1 autograd/_functions.py MatMul4Bit.forward keeps
// ctx.tensors = (A, B) when A or B needs grad; 0.43.2 keeps (None, B).
constexpr Release kFirstWithoutInput{0, 43, 2};
// bitsandbytes 0.46.1 nn/modules.py Linear4bit.__init__: compute_type_is_set = False,
// so the first forward's set_compute_type makes an fp32 input's dtype the compute
// dtype; 0.47.0 sets compute_type_is_set when a compute dtype is given (transformers
// passes bnb_4bit_compute_dtype).
constexpr Release kFirstKeepingComputeDtype{0, 47, 0};
// bitsandbytes 0.50.0 autograd/_functions.py MatMul4Bit.forward runs
// torch.ops.bitsandbytes.gemm_4bit, whose CUDA kernel (backends/cuda/ops.py) picks a fused
// kernel or the dequantized weight; 0.49.2 always runs F.linear(A, dequantize_4bit(B)).
constexpr Release kFirstWithGemmDispatch{0, 50, 0};
// The bottom of the band: a release past all three.
constexpr const char* kCurrentRelease = "0.50.2";

// Whether a 4-bit linear can be fed fp32: an fp32 model (AMP, fp32), or QLoRA's
// preparation upcasting the norms of a 16-bit one (mechanisms/kbit_prep.h).
bool fed_fp32(const RunSettings& settings) {
  return settings.precision != Precision::kBf16Pure || kbit_prep_matters(settings);
}

// The release given, else the oldest the stack installs: Unsloth requires
// bitsandbytes>=0.45.5 (pyproject.toml at 015bdef), past the input MatMul4Bit kept.
std::optional<Release> bnb_release(const RunSettings& settings) {
  const std::optional<Release> given = release_of(settings.versions, "bitsandbytes");
  if (!given && settings.stack == Stack::kUnsloth) return Release{0, 45, 5};
  return given;
}

}  // namespace

bool uses_bnb_4bit(const RunSettings& settings) {
  return settings.mode == TrainMode::kQlora && settings.quant == QuantFormat::kNf4 &&
         settings.stack != Stack::kTorchtune && settings.stack != Stack::kTorchtitan;
}

BnbRegime bnb_regime(const RunSettings& settings) {
  const std::optional<Release> release = bnb_release(settings);
  if (!release) return BnbRegime{true, true, false};
  return BnbRegime{*release < kFirstWithoutInput, *release < kFirstKeepingComputeDtype,
                   !(*release < kFirstWithGemmDispatch)};
}

void add_bnb_unknowns(const RunSettings& settings, std::vector<std::string>& unknowns) {
  if (!uses_bnb_4bit(settings) || bnb_release(settings)) return;
  unknowns.emplace_back(
      std::string("the bitsandbytes release: up to 0.43.1 each 4-bit linear keeps its input for backward, "
                  "past non-reentrant checkpointing too") +
      (fed_fp32(settings) ? ", and up to 0.46 one fed fp32 copies its dequantized weight to fp32" : "") +
      "; from 0.50 a forward GEMM the GPU runs fused holds no dequantized weight (give --versions bitsandbytes=X)");
}

void pin_bnb_bottom(const RunSettings& settings, RunSettings& bottom) {
  if (!uses_bnb_4bit(settings) || bnb_release(settings)) return;
  bottom.versions["bitsandbytes"] = kCurrentRelease;
}

}  // namespace headroom::planner
