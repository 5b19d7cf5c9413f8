// Hugging Face config.json ingestion: the real configs of public models give
// the published parameter counts; the Llama-3-8B config gives exactly the zoo's
// graph; safetensors headers are compared with the graph; bad configs are refused.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "graph/graph_json.h"
#include "models/hf_import.h"

namespace headroom::models {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";

graph::LayerGraph load(const std::string& name) {
  Result<HfModel> model = load_hf_model(kData + name, ZooOptions{});
  REQUIRE_MESSAGE(model.is_ok(), model.message());
  CHECK(model->checkpoint_tensors == 0);
  return model->graph;
}

std::string scratch_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("headroom_hf_" + std::to_string(getpid())) / name;
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("public configs give the published parameter counts") {
  // Model cards / safetensors metadata on huggingface.co.
  CHECK(load("llama-3.2-1b").parameter_count() == 1'235'814'400);   // meta-llama/Llama-3.2-1B, tied embeddings
  CHECK(load("qwen2.5-0.5b").parameter_count() == 494'032'768);     // Qwen/Qwen2.5-0.5B (0.49B), q/k/v biases
  CHECK(load("qwen3-0.6b").parameter_count() == 596'049'920);       // Qwen/Qwen3-0.6B (0.6B; 0.44B non-embedding)
  CHECK(load("mistral-7b").parameter_count() == 7'241'732'096);     // mistralai/Mistral-7B-v0.1 (7.24B)
  CHECK(load("gpt2-medium").parameter_count() == 354'823'168);      // openai-community/gpt2-medium (355M), tied
  // google-bert/bert-base-uncased: BertModel 109,482,240 (with pooler) + a 2-label classifier (768 x 2 + 2).
  CHECK(load("bert-base-uncased").parameter_count() == 109'482'240 + 1'538);
}

TEST_CASE("the Llama-3-8B config.json gives exactly the zoo's graph") {
  graph::LayerGraph from_config = load("llama-3-8b/config.json");
  Result<graph::LayerGraph> zoo = build_zoo_model("llama-3-8b", ZooOptions{});
  REQUIRE(zoo.is_ok());
  from_config.name = zoo->name;
  from_config.description = zoo->description;
  from_config.source = zoo->source;
  CHECK(graph::graphs_equal(from_config, zoo.value()));
}

TEST_CASE("a checkpoint's safetensors header is compared with the graph") {
  const std::string dir = scratch_dir("tiny");
  nlohmann::json config = {{"model_type", "llama"}, {"hidden_size", 8}, {"intermediate_size", 16},
                           {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"vocab_size", 32},
                           {"tie_word_embeddings", true}};
  std::ofstream(dir + "/config.json") << config.dump();
  // Only two tensors: embed_tokens as in the graph, q_proj with a wrong shape, and an extra one.
  const std::string header =
      R"({"model.embed_tokens.weight":{"dtype":"BF16","shape":[32,8],"data_offsets":[0,512]},)"
      R"("model.layers.0.self_attn.q_proj.weight":{"dtype":"BF16","shape":[8,4],"data_offsets":[512,576]},)"
      R"("extra.weight":{"dtype":"F32","shape":[2],"data_offsets":[576,584]}})";
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << header << std::string(584, '\0');
  out.close();
  Result<HfModel> model = load_hf_model(dir, ZooOptions{});
  REQUIRE_MESSAGE(model.is_ok(), model.message());
  CHECK(model->checkpoint_tensors == 3);
  std::string all;
  for (const std::string& line : model->mismatches) all += line + "\n";
  CHECK(all.find("shape differs: model.layers.0.self_attn.q_proj.weight") != std::string::npos);
  CHECK(all.find("in the checkpoint only: extra.weight") != std::string::npos);
  CHECK(all.find("missing from the checkpoint: model.layers.0.mlp.down_proj.weight") != std::string::npos);
  CHECK(all.find("lm_head") == std::string::npos);  // tied: not expected in the checkpoint
}

TEST_CASE("bad configs are refused naming the file and the field") {
  const auto refuse = [](const nlohmann::json& config) {
    Result<graph::LayerGraph> r = graph_from_hf_config(config, "x/config.json", ZooOptions{});
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.message().rfind("x/config.json: ", 0) == 0);
    return r.message();
  };
  nlohmann::json base = {{"model_type", "llama"}, {"hidden_size", 64}, {"intermediate_size", 128},
                         {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 100}};
  CHECK(graph_from_hf_config(base, "x/config.json", ZooOptions{}).is_ok());
  nlohmann::json unknown = base;
  unknown["model_type"] = "mamba";
  const std::string unknown_message = refuse(unknown);
  CHECK(unknown_message.find("llama, mistral, qwen2, qwen3, gpt2, bert") != std::string::npos);
  CHECK(unknown_message.find("layer-graph") != std::string::npos);
  nlohmann::json missing = base;
  missing.erase("hidden_size");
  CHECK(refuse(missing).find("hidden_size") != std::string::npos);
  nlohmann::json negative = base;
  negative["num_hidden_layers"] = -3;
  CHECK(refuse(negative).find("num_hidden_layers") != std::string::npos);
  nlohmann::json kv = base;
  kv["num_key_value_heads"] = 3;
  CHECK(refuse(kv).find("num_key_value_heads") != std::string::npos);
  nlohmann::json wrong_type = base;
  wrong_type["tie_word_embeddings"] = "yes";
  CHECK(refuse(wrong_type).find("tie_word_embeddings") != std::string::npos);
  CHECK(refuse(nlohmann::json{{"_class_name", "FluxTransformer2DModel"}}).find("diffusers") != std::string::npos);
  CHECK(refuse(nlohmann::json::array()).find("(top level)") != std::string::npos);
  CHECK_FALSE(load_hf_model("/nonexistent/dir/config.json", ZooOptions{}).is_ok());
}

}  // namespace headroom::models

TEST_CASE("fuzz regressions: config.json inputs fail cleanly") {
  const std::filesystem::path dir = std::filesystem::path(HEADROOM_SOURCE_DIR) / "tests/data/fuzz_regressions/fuzz_hf_config";
  int replayed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const auto json = headroom::graph::parse_json_text(buffer.str(), "config.json");
    if (json.is_ok()) (void)headroom::models::graph_from_hf_config(json.value(), "config.json", headroom::models::ZooOptions{});
    ++replayed;
  }
  CHECK(replayed > 0);
}
