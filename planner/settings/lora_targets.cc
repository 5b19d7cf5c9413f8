#include "planner/settings/lora_targets.h"

#include <algorithm>
#include <cctype>

namespace headroom::planner {

bool is_all_linear(const std::vector<std::string>& targets) {
  if (targets.size() != 1 || targets.front().size() != kAllLinear.size()) return false;
  return std::equal(kAllLinear.begin(), kAllLinear.end(), targets.front().begin(), [](char a, char b) {
    return a == std::tolower(static_cast<unsigned char>(b));
  });
}

}  // namespace headroom::planner
