// What the run's bitsandbytes release and GPU make of QLoRA's 4-bit linears
// (mechanisms/bnb_matmul4bit.h), read off the settings.
#pragma once

#include <cstdint>
#include <optional>

#include "planner/mechanisms/bnb_matmul4bit.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// The release's regime (settings/bnb_release.h); from 0.50 also the gemm_4bit dispatch
// on the run's catalogue GPU at its micro-batch and `seq` (the resolved sequence length;
// nullopt when it could not be resolved). A --gpu-file or --gpu-mem GPU, or a catalogue
// GPU without a known SM count, gets no dispatch: every forward dequantizes, the
// conservative answer.
BnbMatmul4bit bnb_matmul4bit_of(const RunSettings& settings, std::optional<int64_t> seq);

}  // namespace headroom::planner
