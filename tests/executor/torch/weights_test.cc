// Pretrained weights from safetensors: a Hugging Face directory written here
// (config.json + model.safetensors) loads into the LibTorch decoder exactly,
// tied embeddings stay one parameter, and a checkpoint that does not match the
// config is refused naming the file and the tensor.
#include <doctest/doctest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "executor/run.h"
#include "executor/weights.h"
#include "models/torch/llama_module.h"
#include "planner/predict/planner.h"

// c10/util/logging defines CHECK (an abort); the tests mean doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace headroom::executor {
namespace {

namespace tm = models::torch_modules;

// A Llama-architecture config small enough for the CPU, with tied embeddings.
constexpr const char* kConfig = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
  "max_position_embeddings": 256, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";

models::LlamaConfig tiny_tied() {
  models::LlamaConfig c = models::kTinyLlama;
  c.layers = 2;
  c.tie_embeddings = true;
  return c;
}

// Writes `tensors` as a safetensors file (BF16), as huggingface/safetensors lays it out.
void write_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.detach().to(torch::kBFloat16).contiguous();
    const auto begin = static_cast<int64_t>(data.size());
    data.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
    header[name] = {{"dtype", "BF16"}, {"shape", t.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << text << data;
}

std::string model_dir(const std::string& name) {
  const std::string dir = "/tmp/headroom_weights_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << kConfig;
  return dir;
}

std::map<std::string, torch::Tensor> parameters_of(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (auto& item : module.named_parameters()) out[item.key()] = item.value();
  return out;
}

}  // namespace

TEST_CASE("tied embeddings are one parameter, used by the head") {
  tm::LlamaForCausalLM model(tiny_tied());
  const auto params = parameters_of(*model);
  CHECK(params.count("model.embed_tokens.weight") == 1);
  CHECK(params.count("lm_head.weight") == 0);
  CHECK(model->lm_head->weight.is_same(model->embed_tokens->weight));
  model->to(torch::kBFloat16);  // converting in place keeps them one tensor
  CHECK(model->lm_head->weight.is_same(model->embed_tokens->weight));
  CHECK((model->lm_head->weight.scalar_type() == torch::kBFloat16));
}

TEST_CASE("safetensors weights load exactly into the decoder") {
  const std::string dir = model_dir("exact");
  torch::manual_seed(1);
  tm::LlamaForCausalLM source(tiny_tied());
  write_safetensors(dir + "/model.safetensors", parameters_of(*source));
  CHECK(has_safetensors(dir).value());
  CHECK(has_safetensors(dir + "/config.json").value());

  torch::manual_seed(2);
  tm::LlamaForCausalLM target(tiny_tied());
  Result<LoadedWeights> loaded = load_safetensors(*target, dir);
  REQUIRE_MESSAGE(loaded.is_ok(), loaded.message());
  CHECK(loaded->tensors == static_cast<int>(parameters_of(*target).size()));
  for (const auto& [name, tensor] : parameters_of(*source)) {
    CHECK_MESSAGE(torch::equal(parameters_of(*target).at(name), tensor.to(torch::kBFloat16).to(torch::kFloat)), name);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a checkpoint that does not match the config is refused, naming the file and the tensor") {
  const std::string dir = model_dir("bad");
  torch::manual_seed(1);
  tm::LlamaForCausalLM source(tiny_tied());
  auto params = parameters_of(*source);
  params["model.layers.1.mlp.up_proj.weight"] = torch::zeros({175, 64});
  write_safetensors(dir + "/model.safetensors", params);
  tm::LlamaForCausalLM target(tiny_tied());
  Result<LoadedWeights> wrong_shape = load_safetensors(*target, dir);
  REQUIRE_FALSE(wrong_shape.is_ok());
  CHECK(wrong_shape.message() ==
        dir + "/model.safetensors: model.layers.1.mlp.up_proj.weight: shape [175, 64], expected [176, 64] from the "
              "config (nothing was trained)");

  params = parameters_of(*source);
  params.erase("model.norm.weight");
  write_safetensors(dir + "/model.safetensors", params);
  Result<LoadedWeights> missing = load_safetensors(*target, dir);
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.message().find("has no tensor \"model.norm.weight\"") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a dangling model.safetensors link is an error naming it, not random weights (issue 14)") {
  const std::string dir = model_dir("dangling");
  CHECK_FALSE(has_safetensors(dir).value());  // no weights file at all: random initialisation
  std::filesystem::create_symlink("../blobs/0123abcd.incomplete", dir + "/model.safetensors");
  const Result<bool> dangling = has_safetensors(dir);
  REQUIRE_FALSE(dangling.is_ok());
  CHECK(dangling.message().find(dir + "/model.safetensors: a symbolic link to ../blobs/0123abcd.incomplete") == 0);

  planner::RunSettings settings;
  settings.model = dir;
  settings.gpu = "a6000";
  settings.seq_len = 16;
  Result<planner::FitAnswer> answer = planner::fit(settings);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  RunOptions options;
  options.steps = 1;
  options.device = "cpu";
  RunObserver quiet;
  Result<RunResult> r = train_plan(answer->as_given, options, quiet);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.message().find(dir + "/model.safetensors") == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("resume refuses a checkpoint when the model's config changed under the same path (issue 14)") {
  const std::string dir = model_dir("changed");
  std::string untied = kConfig;
  untied.replace(untied.find("\"tie_word_embeddings\": true"), 27, "\"tie_word_embeddings\": false");
  std::ofstream(dir + "/config.json") << untied;
  planner::RunSettings settings;
  settings.model = dir;
  settings.gpu = "a6000";
  settings.seq_len = 16;
  Result<planner::FitAnswer> answer = planner::fit(settings);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  RunOptions options;
  options.steps = 1;
  options.device = "cpu";
  options.checkpoint_dir = dir + "/ckpt";
  RunObserver quiet;
  Result<RunResult> first = train_plan(answer->as_given, options, quiet);
  REQUIRE_MESSAGE(first.is_ok(), first.message());

  // Same path, same plan file, tied embeddings now: lm_head and its optimizer state would vanish.
  std::ofstream(dir + "/config.json") << kConfig;
  RunOptions resume = options;
  resume.steps = 2;
  resume.resume_dir = options.checkpoint_dir;
  Result<RunResult> resumed = train_plan(answer->as_given, resume, quiet);
  REQUIRE_FALSE(resumed.is_ok());
  CHECK_MESSAGE(resumed.message().find(dir + "/ckpt/step-00000001/run.json: identity: written by another run "
                                             "(parameters \"crc32c ") == 0,
                resumed.message());
  std::filesystem::remove_all(dir);
}

TEST_CASE("headroom run trains a Hugging Face directory from its weights") {
  const std::string dir = model_dir("run");
  torch::manual_seed(1);
  tm::LlamaForCausalLM source(tiny_tied());
  write_safetensors(dir + "/model.safetensors", parameters_of(*source));
  planner::RunSettings settings;
  settings.model = dir;
  settings.gpu = "a6000";
  settings.seq_len = 64;
  settings.micro_batch = 2;
  settings.mode = planner::TrainMode::kLora;
  settings.lora.rank = 4;
  Result<planner::FitAnswer> answer = planner::fit(settings);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  RunOptions options;
  options.steps = 2;
  options.device = "cpu";
  RunObserver quiet;
  Result<RunResult> r = train_plan(answer->as_given, options, quiet);
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  bool loaded = false;
  for (const std::string& note : r->notes) loaded |= note == "weights: loaded from " + dir + "/model.safetensors";
  CHECK(loaded);
  for (const CategoryCheck& c : r->categories) {
    if (c.category == "parameters" || c.category == "activations") {
      INFO(c.category << ": predicted " << c.predicted << " measured " << c.measured);
      CHECK(std::abs(c.relative_error()) <= 0.05);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace headroom::executor
