// Inputs the config-reader fuzzers once crashed or hung on (scripts/fuzz.sh,
// tests/data/fuzz_regressions/fuzz_torchtune and fuzz_hf_trainer), replayed
// through the readers those targets drive (tests/fuzz/fuzz_torchtune.cc,
// fuzz_hf_trainer.cc) with the same property: whatever a reader accepts is
// valid settings, and what it refuses names its file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "planner/configs/accelerate_import.h"
#include "planner/configs/axolotl_import.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/configs/peft_import.h"
#include "planner/configs/llamafactory_import.h"
#include "planner/configs/torchtune_import.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

std::vector<std::string> corpus(const std::string& target) {
  std::vector<std::string> out;
  const std::filesystem::path dir = std::filesystem::path(HEADROOM_SOURCE_DIR) / "tests/data/fuzz_regressions" / target;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    out.push_back(buffer.str());
  }
  return out;
}

template <typename Imported>
void check_clean(const Imported& imported, const std::string& origin) {
  if (imported.is_ok()) {
    CHECK(validate_settings(imported->settings, "fuzz").is_ok());
  } else {
    CHECK(imported.message().find(origin) != std::string::npos);
  }
}

TEST_CASE("fuzz regressions: torchtune and Accelerate YAML inputs are refused or valid") {
  const std::vector<std::string> inputs = corpus("fuzz_torchtune");
  REQUIRE_FALSE(inputs.empty());
  for (const std::string& text : inputs) {
    check_clean(import_torchtune_config(text, "c.yaml", {}, RunSettings{}), "c.yaml");
    check_clean(import_accelerate_config(text, "a.yaml", RunSettings{}), "a.yaml");
  }
}

TEST_CASE("fuzz regressions: TrainingArguments, PEFT, axolotl and LLaMA-Factory inputs are refused or valid") {
  const std::vector<std::string> inputs = corpus("fuzz_hf_trainer");
  REQUIRE_FALSE(inputs.empty());
  for (const std::string& text : inputs) {
    check_clean(import_training_arguments(text, "args", RunSettings{}), "args");
    check_clean(import_peft_config(text, "peft", RunSettings{}), "peft");
    check_clean(import_axolotl_config(text, "axolotl", RunSettings{}), "axolotl");
    check_clean(import_llamafactory_config(text, "llamafactory", RunSettings{}), "llamafactory");
  }
}

}  // namespace
}  // namespace headroom::planner
