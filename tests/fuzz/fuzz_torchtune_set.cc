// libFuzzer target: torchtune's command-line overrides (--torchtune-set KEY=VALUE,
// ~KEY; planner/configs/yaml_config.h) on a small recipe config, one override per
// line of the input. The config's depth limit holds for what they build (issue 37:
// a 60,000-level key got past it); whatever is accepted is valid settings.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/configs/torchtune_import.h"
#include "planner/settings/validate_settings.h"

namespace {

constexpr const char* kConfig =
    "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_rank: 8\n"
    "batch_size: 2\ntokenizer:\n  max_seq_len: 512\noptimizer:\n  _component_: torch.optim.AdamW\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace planner = headroom::planner;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    overrides.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  auto imported = planner::import_torchtune_config(kConfig, "c.yaml", overrides, planner::RunSettings{});
  if (imported.is_ok() && !planner::validate_settings(imported->settings, "fuzz").is_ok()) __builtin_trap();
  return 0;
}
