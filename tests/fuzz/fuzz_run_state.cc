// libFuzzer target: run.json of a training-state checkpoint (executor/run_state.h),
// read when a run resumes. What it accepts survives its own round trip.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "executor/run_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto state = headroom::executor::parse_run_state(text, "run.json", 6);
  if (!state.is_ok()) return 0;
  auto back = headroom::executor::parse_run_state(headroom::executor::run_state_text(state.value()), "run.json", 6);
  if (!back.is_ok() || back->identity != state->identity || back->clean_steps != state->clean_steps) __builtin_trap();
  return 0;
}
