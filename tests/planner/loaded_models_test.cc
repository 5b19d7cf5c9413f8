// The graphs a search reuses (planner/predict/loaded_models.h): a kept graph must
// be the one a new build would make, so a changed option or a changed file builds
// again.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "planner/predict/loaded_models.h"

namespace headroom::planner {
namespace {

namespace fs = std::filesystem;

void write_llama_config(const fs::path& path, int layers) {
  std::ofstream out(path);
  out << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "num_hidden_layers": )" << layers << R"(, "vocab_size": 256, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "hidden_act": "silu"})";
}

TEST_CASE("a kept zoo graph is returned for the same options and rebuilt for others") {
  models::ZooOptions sdpa;
  models::ZooOptions eager;
  eager.attention = models::AttentionImpl::kEager;
  Result<LoadedModel> first = load_model("tiny-llama", false, sdpa);
  Result<LoadedModel> again = load_model("tiny-llama", false, sdpa);
  Result<LoadedModel> other = load_model("tiny-llama", false, eager);
  REQUIRE(first.is_ok());
  REQUIRE(again.is_ok());
  REQUIRE(other.is_ok());
  CHECK(again->graph.nodes.size() == first->graph.nodes.size());
  CHECK(other->graph.nodes.size() != first->graph.nodes.size());
  CHECK_FALSE(first->from_hf);
}

TEST_CASE("a config.json changed on disk is read again") {
  const fs::path dir = fs::temp_directory_path() / ("headroom_loaded_models_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path config = dir / "config.json";
  write_llama_config(config, 2);
  Result<LoadedModel> two = load_model(config.string(), true, {});
  write_llama_config(config, 12);  // one more character: the size changes whatever the clock's grain
  Result<LoadedModel> twelve = load_model(config.string(), true, {});
  fs::remove_all(dir);
  REQUIRE(two.is_ok());
  REQUIRE(twelve.is_ok());
  CHECK(two->from_hf);
  CHECK(two->graph.blocks.size() + 10 == twelve->graph.blocks.size());
}

TEST_CASE("a failed load is not kept") {
  Result<LoadedModel> missing = load_model("/nonexistent/headroom/config.json", true, {});
  CHECK_FALSE(missing.is_ok());
  CHECK_FALSE(load_model("no-such-zoo-model", false, {}).is_ok());
}

}  // namespace
}  // namespace headroom::planner
