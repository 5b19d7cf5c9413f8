// What the bitsandbytes release changes in QLoRA's 4-bit linears (docs/stacks.md,
// "bitsandbytes releases"), read off --versions bitsandbytes=X (or a pip freeze).
// Where the run does not give the release, the band covers both ends: its top the
// oldest regime (it holds the most), its bottom the current one.
#pragma once

#include <string>
#include <vector>

#include "planner/settings/run_settings.h"

namespace headroom::planner {

// QLoRA whose 4-bit linears are bitsandbytes' Linear4bit: NF4 under every stack but
// torchtune and torchtitan, which build on torchao (torchtune's FrozenNF4Linear).
bool uses_bnb_4bit(const RunSettings& settings);

struct BnbRegime {
  // MatMul4Bit keeps its input A for backward: up to 0.43.1.
  bool keeps_input = false;
  // A Linear4bit fed fp32 computes in fp32: up to 0.46.
  bool fp32_compute = false;
  // The forward's gemm_4bit dispatches between a fused kernel and the dequantized
  // weight per GPU and shape (mechanisms/bnb_gemm_dispatch.h): from 0.50.0.
  bool gemm_dispatch = false;
};

// The run's release's regime; the oldest (the band's top) when no release is given.
BnbRegime bnb_regime(const RunSettings& settings);

// Where the release is open and matters: the words for the band's unknowns, and
// the band's bottom pinned to a current release.
void add_bnb_unknowns(const RunSettings& settings, std::vector<std::string>& unknowns);
void pin_bnb_bottom(const RunSettings& settings, RunSettings& bottom);

}  // namespace headroom::planner
