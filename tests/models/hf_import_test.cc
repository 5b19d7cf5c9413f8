// Hugging Face config.json ingestion: the real configs of public models give
// the published parameter counts; the Llama-3-8B config gives exactly the zoo's
// graph; safetensors headers are compared with the graph; bad configs are refused.
#include "models/hf_import.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/graph_json.h"
#include "graph/validate.h"
#include "models/zoo_builders.h"

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
  const auto dir =
      std::filesystem::temp_directory_path() / ("headroom_hf_" + std::to_string(getpid())) / name;
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("public configs give the published parameter counts") {
  // Model cards / safetensors metadata on huggingface.co.
  CHECK(load("llama-3.2-1b").parameter_count() ==
        1'235'814'400);  // meta-llama/Llama-3.2-1B, tied embeddings
  CHECK(load("qwen2.5-0.5b").parameter_count() ==
        494'032'768);  // Qwen/Qwen2.5-0.5B (0.49B), q/k/v biases
  CHECK(load("qwen3-0.6b").parameter_count() ==
        596'049'920);  // Qwen/Qwen3-0.6B (0.6B; 0.44B non-embedding)
  CHECK(load("mistral-7b").parameter_count() ==
        7'241'732'096);  // mistralai/Mistral-7B-v0.1 (7.24B)
  CHECK(load("gpt2-medium").parameter_count() ==
        354'823'168);  // openai-community/gpt2-medium (355M), tied
  // google-bert/bert-base-uncased: BertModel 109,482,240 (with pooler) + a 2-label classifier (768
  // x 2 + 2).
  CHECK(load("bert-base-uncased").parameter_count() == 109'482'240 + 1'538);
}

// Within 1% of a published figure (the exact figures above are exact).
void check_near(const std::string& name, double published) {
  const double count = static_cast<double>(load(name).parameter_count());
  CHECK_MESSAGE(std::abs(count - published) / published < 0.01, name, ": ", count, " vs ",
                published);
}

TEST_CASE("every family: the public config.json gives the published parameter count") {
  // google/gemma-2b: 2.51B (safetensors metadata 2,506,172,416); GeGLU, 1 kv head, head_dim 256,
  // tied.
  CHECK(load("gemma-2b").parameter_count() == 2'506'172'416);
  // microsoft/Phi-3-mini-4k-instruct: 3.82B (3,821,079,552); fused qkv_proj and gate_up_proj.
  CHECK(load("phi-3-mini-4k").parameter_count() == 3'821'079'552);
  // EleutherAI/pythia-160m: 162,322,944 total (Pythia paper, Biderman et al. 2023, Table 1 / model
  // card).
  CHECK(load("pythia-160m").parameter_count() == 162'322'944);
  // facebook/opt-125m: 125,239,296 (OPTForCausalLM, lm_head tied; "125M" in Zhang et al. 2022).
  CHECK(load("opt-125m").parameter_count() == 125'239'296);
  // FacebookAI/roberta-base: RobertaModel 124,645,632 (with pooler; "125M"); the classification
  // head replaces the pooler (768 x 768 + 768) and adds out_proj (768 x 2 + 2).
  CHECK(load("roberta-base").parameter_count() == 124'645'632 + 1'538);
  // google/vit-base-patch16-224: 86,567,656 (ViTForImageClassification, 1000 classes; 86.6M).
  CHECK(load("vit-base-patch16-224").parameter_count() == 86'567'656);
  // openai/clip-vit-base-patch32: CLIPModel 151,277,313 (151M on the model page).
  CHECK(load("clip-vit-base-patch32").parameter_count() == 151'277'313);
  // google/siglip-base-patch16-224: 203M on the model page (SiglipModel, both towers and heads).
  check_near("siglip-base-patch16-224", 203.16e6);
  // llava-hf/llava-1.5-7b-hf: 7.06B (7,063,427,072): Vicuna-7B (vocab 32064) + CLIP ViT-L/14-336 +
  // projector.
  CHECK(load("llava-1.5-7b").parameter_count() == 7'063'427'072);
  // black-forest-labs/FLUX.1-dev transformer: 12B (11,901,408,320 in the diffusers checkpoint).
  CHECK(load("flux.1-dev-transformer").parameter_count() == 11'901'408'320);
}

TEST_CASE("family details: ties, fused projections, sequences, dtypes") {
  const graph::LayerGraph gemma = load("gemma-2b");
  CHECK(gemma.find_node("lm_head") != nullptr);
  CHECK(gemma.find_node("lm_head")->params[0].tied_to == "model.embed_tokens.weight");
  CHECK(gemma.find_node("model.layers.0.self_attn.k_proj")->params[0].shape ==
        std::vector<int64_t>{256, 2048});
  const graph::LayerGraph phi3 = load("phi-3-mini-4k");
  CHECK(phi3.find_node("model.layers.0.self_attn.qkv_proj") != nullptr);
  CHECK(phi3.find_node("model.layers.0.mlp.gate_up_proj")->params[0].shape ==
        std::vector<int64_t>{16384, 3072});
  CHECK(phi3.sequence.max_seq == 4096);
  const graph::LayerGraph pythia = load("pythia-160m");
  CHECK(pythia.find_node("gpt_neox.layers.11.attention.query_key_value") != nullptr);
  CHECK(pythia.find_node("embed_out")->params[0].tied_to.empty());
  const graph::LayerGraph opt = load("opt-125m");
  CHECK(opt.find_node("model.decoder.embed_positions")->params[0].shape ==
        std::vector<int64_t>{2050, 768});
  CHECK(opt.find_node("model.decoder.layers.0.fc1")->params[0].dtype ==
        graph::DType::kF16);  // torch_dtype
  const graph::LayerGraph vit = load("vit-base-patch16-224");
  CHECK(vit.sequence.unit == "image");
  CHECK(vit.sequence.default_seq == 197);
  const graph::LayerGraph siglip = load("siglip-base-patch16-224");
  CHECK(siglip.sequence.default_seq == 196);  // no class token
  CHECK(siglip.find_node("vision_model.head.attention") != nullptr);
  const graph::LayerGraph llava = load("llava-1.5-7b");
  CHECK(llava.find_node("language_model.model.layers.31.mlp.down_proj") != nullptr);
  CHECK(llava.sequence.max_seq == 4096);
  const graph::LayerGraph flux = load("flux.1-dev-transformer");
  CHECK(flux.find_node("single_transformer_blocks.37.proj_out") != nullptr);
  // FLUX.1-schnell: no guidance embedder (guidance_embeds false).
  nlohmann::json schnell = {{"_class_name", "FluxTransformer2DModel"}, {"guidance_embeds", false}};
  Result<graph::LayerGraph> s = graph_from_hf_config(schnell, "schnell/config.json", ZooOptions{});
  REQUIRE_MESSAGE(s.is_ok(), s.message());
  CHECK(s->parameter_count() == 11'901'408'320 - (256 * 3072 + 3072 + 3072 * 3072 + 3072));
  // The vision towers alone.
  nlohmann::json clip_vision = {{"model_type", "clip_vision_model"},
                                {"hidden_size", 1024},
                                {"intermediate_size", 4096},
                                {"num_hidden_layers", 24},
                                {"num_attention_heads", 16},
                                {"patch_size", 14},
                                {"image_size", 336}};
  Result<graph::LayerGraph> cv = graph_from_hf_config(clip_vision, "cv/config.json", ZooOptions{});
  REQUIRE_MESSAGE(cv.is_ok(), cv.message());
  CHECK(cv->parameter_count() == build_clip_vit_l14_336_vision(ZooOptions{}).parameter_count());
  Result<graph::LayerGraph> sv =
      graph_from_hf_config({{"model_type", "siglip_vision_model"}}, "sv/config.json", ZooOptions{});
  REQUIRE_MESSAGE(sv.is_ok(), sv.message());
}

TEST_CASE("model_type from architectures when the field is missing") {
  nlohmann::json config = {{"architectures", {"Qwen2ForCausalLM"}},
                           {"hidden_size", 64},
                           {"intermediate_size", 128},
                           {"num_hidden_layers", 2},
                           {"num_attention_heads", 4},
                           {"vocab_size", 100}};
  Result<graph::LayerGraph> g = graph_from_hf_config(config, "x/config.json", ZooOptions{});
  REQUIRE_MESSAGE(g.is_ok(), g.message());
  CHECK(g->family == "qwen2");
  CHECK(g->find_node("model.layers.0.self_attn.q_proj")->params.size() == 2);  // Qwen2: q bias
}

TEST_CASE("every attention implementation and dropout override builds a valid graph per family") {
  for (const char* name : {"gemma-2b", "phi-3-mini-4k", "pythia-160m", "opt-125m", "roberta-base",
                           "vit-base-patch16-224", "clip-vit-base-patch32",
                           "siglip-base-patch16-224", "llava-1.5-7b", "flux.1-dev-transformer", "sd3.5-medium", "dinov2-giant",
                           "qwen-7b"}) {
    for (AttentionImpl impl :
         {AttentionImpl::kEager, AttentionImpl::kSdpa, AttentionImpl::kFlex, AttentionImpl::kTritonFlash}) {
      ZooOptions options;
      options.attention = impl;
      options.dropout = 0.1;
      Result<HfModel> model = load_hf_model(kData + name, options);
      CHECK_MESSAGE(model.is_ok(), name, ": ", model.message());
    }
  }
}

TEST_CASE("the Llama-3-8B config.json gives exactly the zoo's graph, with transformers' RMSNorm") {
  // The zoo entry models the fused RMSNorm of headroom's executor; a config.json
  // models what transformers runs (LlamaRMSNorm as Python ops, found by the
  // exporter's cross-check, docs/exporter.md). Everything else is the same graph.
  graph::LayerGraph from_config = load("llama-3-8b/config.json");
  LlamaConfig config = kLlama3_8b;
  config.rms_norm = RmsNormStyle::kTransformers;
  graph::LayerGraph expected = build_llama(config, ZooOptions{});
  Result<graph::LayerGraph> zoo = build_zoo_model("llama-3-8b", ZooOptions{});
  REQUIRE(zoo.is_ok());
  expected.name = from_config.name = zoo->name;
  expected.description = from_config.description = zoo->description;
  expected.source = from_config.source = zoo->source;
  expected.family = zoo->family;
  expected.sequence = zoo->sequence;
  expected.lora_targets = zoo->lora_targets;
  CHECK(graph::graphs_equal(from_config, expected));
  CHECK(from_config.parameter_count() == zoo->parameter_count());
  CHECK_FALSE(graph::graphs_equal(from_config, zoo.value()));
}

TEST_CASE("the original Qwen-7B config.json (remote code, model_type qwen) gives the zoo's qwen-7b graph") {
  graph::LayerGraph from_config = load("qwen-7b/config.json");
  Result<graph::LayerGraph> zoo = build_zoo_model("qwen-7b", ZooOptions{});
  REQUIRE(zoo.is_ok());
  CHECK(from_config.family == "qwen");
  CHECK(from_config.find_node("transformer.h.0.attn.c_attn") != nullptr);
  CHECK(from_config.find_node("transformer.h.0.mlp.w1")->linear->out_features == 11008);  // 22016 / 2
  from_config.name = zoo->name;
  from_config.description = zoo->description;
  from_config.source = zoo->source;
  from_config.sequence = zoo->sequence;
  CHECK(graph::graphs_equal(from_config, zoo.value()));
  CHECK(from_config.parameter_count() == zoo->parameter_count());
}

TEST_CASE("a Qwen config headroom cannot build exactly is refused, naming the field") {
  const std::string dir = scratch_dir("qwen-odd");
  std::ifstream original(kData + "qwen-7b/config.json");
  nlohmann::json config = nlohmann::json::parse(original);
  const auto write_config = [&] { std::ofstream(dir + "/config.json") << config.dump(); };
  config["kv_channels"] = 64;
  write_config();
  Result<HfModel> odd = load_hf_model(dir, ZooOptions{});
  REQUIRE_FALSE(odd.is_ok());
  CHECK(odd.message().find("kv_channels: expected hidden_size / num_attention_heads = 128") != std::string::npos);
  config["kv_channels"] = 128;
  config["no_bias"] = false;
  write_config();
  odd = load_hf_model(dir, ZooOptions{});
  REQUIRE_FALSE(odd.is_ok());
  CHECK(odd.message().find("no_bias: expected true") != std::string::npos);
}

TEST_CASE("DINOv2-giant: SwiGLU FFN of 4096, layer scales, the class-and-mean-patch classifier") {
  graph::LayerGraph g = load("dinov2-giant");
  CHECK(g.family == "dinov2");
  // int(1536 * 4) * 2 / 3 = 4096 (a multiple of 8): weights_in 1536 -> 8192, weights_out 4096 -> 1536.
  CHECK(g.find_node("dinov2.encoder.layer.0.mlp.weights_in")->linear->out_features == 8192);
  CHECK(g.find_node("dinov2.encoder.layer.0.mlp.weights_out")->linear->in_features == 4096);
  CHECK(g.find_node("dinov2.encoder.layer.39.layer_scale2") != nullptr);
  // Per layer: norms 2 x 3072, q/k/v/out 4 x (1536^2 + 1536), weights_in 1536 x 8192 + 8192,
  // weights_out 4096 x 1536 + 1536, two lambdas of 1536: 28,336,640. Embeddings: patch conv
  // 1536 x 3 x 14 x 14 + 1536, cls and mask tokens, 1370 positions (518/14 = 37, 37^2 + 1):
  // 3,012,096. Final layernorm 3072. Dinov2Model: 1,136,480,768 (facebook/dinov2-giant, 1.14B);
  // the default 2-label classifier over 2 x 1536 adds 6,146.
  CHECK(g.parameter_count() == int64_t{40} * 28'336'640 + 3'012'096 + 3'072 + 6'146);
  CHECK(g.sequence.default_resolution == 518);
  CHECK(g.sequence.default_seq == 37 * 37 + 1);
}

TEST_CASE("a DINOv2 mlp_ratio that is not a positive number of at most 64 is refused, naming the field") {
  const std::string dir = scratch_dir("dinov2-odd");
  std::ifstream original(kData + "dinov2-giant/config.json");
  nlohmann::json config = nlohmann::json::parse(original);
  for (const nlohmann::json& bad : {nlohmann::json("4"), nlohmann::json(0), nlohmann::json(65)}) {
    config["mlp_ratio"] = bad;
    std::ofstream(dir + "/config.json") << config.dump();
    const Result<HfModel> odd = load_hf_model(dir, ZooOptions{});
    REQUIRE_FALSE(odd.is_ok());
    CHECK_MESSAGE(odd.message().find("mlp_ratio: expected a number in (0, 64], got " + bad.dump()) != std::string::npos,
                  odd.message());
  }
}

TEST_CASE("timm ViT-g/14 DINOv2: the Hub config names the model, num_classes from the run's create_model") {
  // The Hub config as published is the headless feature extractor (num_classes 0): refused by name.
  const Result<HfModel> headless = load_hf_model(kData + "timm-vit-giant-patch14-dinov2", ZooOptions{});
  REQUIRE_FALSE(headless.is_ok());
  CHECK_MESSAGE(headless.message().find("num_classes: expected the classifier's class count") != std::string::npos,
                headless.message());

  const std::string dir = scratch_dir("timm-vitg");
  std::ifstream original(kData + "timm-vit-giant-patch14-dinov2/config.json");
  nlohmann::json config = nlohmann::json::parse(original);
  config["model_args"] = {{"num_classes", 45}};  // timm.create_model(name, num_classes=45)
  std::ofstream(dir + "/config.json") << config.dump();
  Result<HfModel> model = load_hf_model(dir, ZooOptions{});
  REQUIRE_MESSAGE(model.is_ok(), model.message());
  const graph::LayerGraph& g = model->graph;
  // Fused qkv with bias, SwiGLUPacked fc1 1536 -> 8192 and fc2 4096 -> 1536, ls1/ls2.gamma.
  CHECK(g.find_node("blocks.0.attn.qkv")->linear->out_features == 3 * 1536);
  CHECK(g.find_node("blocks.0.mlp.fc1")->linear->out_features == 8192);
  CHECK(g.find_node("blocks.39.mlp.fc2")->linear->in_features == 4096);
  CHECK(g.find_node("blocks.39.ls2") != nullptr);
  CHECK(g.find_node("head")->linear->in_features == 1536);  // the class token alone
  // As HF's Dinov2Model less its mask_token (1,136,480,768 - 1,536: timm's 1136.5M), plus
  // the head 1536 x 45 + 45.
  CHECK(g.parameter_count() == int64_t{1'136'479'232} + 1536 * 45 + 45);
  CHECK(g.sequence.default_resolution == 518);
  CHECK(g.lora_targets == std::vector<std::string>{"qkv", "proj", "fc1", "fc2"});

  // What is not built is refused by name.
  for (const auto& [key, value, expected] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"global_pool", "avg", "global_pool: expected \"token\""},
           {"drop_path_rate", 0.1, "drop_path_rate: expected 0"},
           {"class_token", false, "model_args.class_token: expected only img_size"}}) {
    nlohmann::json odd = config;
    odd["model_args"][key] = value;
    std::ofstream(dir + "/config.json") << odd.dump();
    const Result<HfModel> refused = load_hf_model(dir, ZooOptions{});
    REQUIRE_FALSE(refused.is_ok());
    CHECK_MESSAGE(refused.message().find(expected) != std::string::npos, refused.message());
  }
  nlohmann::json unknown = config;
  unknown["architecture"] = "vit_base_patch16_clip_224";
  std::ofstream(dir + "/config.json") << unknown.dump();
  const Result<HfModel> refused = load_hf_model(dir, ZooOptions{});
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("architecture: expected a timm VisionTransformer headroom builds") !=
        std::string::npos);
}

TEST_CASE("a checkpoint's safetensors header is compared with the graph") {
  const std::string dir = scratch_dir("tiny");
  nlohmann::json config = {{"model_type", "llama"},      {"hidden_size", 8},
                           {"intermediate_size", 16},    {"num_hidden_layers", 1},
                           {"num_attention_heads", 2},   {"vocab_size", 32},
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
  CHECK(all.find("missing from the checkpoint: model.layers.0.mlp.down_proj.weight") !=
        std::string::npos);
  CHECK(all.find("lm_head") == std::string::npos);  // tied: not expected in the checkpoint
}

TEST_CASE("checkpoint dtypes, base-model names and bitsandbytes 4-bit weights") {
  const std::string dir = scratch_dir("tiny_nf4");
  nlohmann::json config = {{"model_type", "llama"},      {"hidden_size", 8},
                           {"intermediate_size", 16},    {"num_hidden_layers", 1},
                           {"num_attention_heads", 2},   {"vocab_size", 32},
                           {"tie_word_embeddings", true}};
  std::ofstream(dir + "/config.json") << config.dump();
  // embed_tokens stored as F32 without the "model." prefix; q_proj packed NF4 (64 values in 32
  // bytes).
  const std::string header =
      R"({"embed_tokens.weight":{"dtype":"F32","shape":[32,8],"data_offsets":[0,1024]},)"
      R"("model.layers.0.self_attn.q_proj.weight":{"dtype":"U8","shape":[32,1],"data_offsets":[1024,1056]},)"
      R"("model.layers.0.self_attn.q_proj.weight.absmax":{"dtype":"F32","shape":[1],"data_offsets":[1056,1060]},)"
      R"("model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4":{"dtype":"U8","shape":[4],"data_offsets":[1060,1064]}})";
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << header << std::string(1064, '\0');
  out.close();
  Result<HfModel> model = load_hf_model(dir + "/config.json", ZooOptions{});
  REQUIRE_MESSAGE(model.is_ok(), model.message());
  std::string all;
  for (const std::string& line : model->mismatches) all += line + "\n";
  CHECK(all.find("embed_tokens") == std::string::npos);
  CHECK(all.find("q_proj") == std::string::npos);
  CHECK(all.find("missing from the checkpoint: model.layers.0.self_attn.k_proj.weight") !=
        std::string::npos);
  CHECK(model->graph.find_node("model.embed_tokens")->params[0].dtype == graph::DType::kF32);
  CHECK(model->graph.find_node("model.layers.0.self_attn.q_proj")->params[0].dtype ==
        graph::DType::kNF4);
  CHECK(model->graph.find_node("model.layers.0.self_attn.k_proj")->params[0].dtype ==
        graph::DType::kBF16);
}

TEST_CASE("bad configs are refused naming the file and the field") {
  const auto refuse = [](const nlohmann::json& config) {
    Result<graph::LayerGraph> r = graph_from_hf_config(config, "x/config.json", ZooOptions{});
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.message().rfind("x/config.json: ", 0) == 0);
    return r.message();
  };
  nlohmann::json base = {{"model_type", "llama"},    {"hidden_size", 64},
                         {"intermediate_size", 128}, {"num_hidden_layers", 2},
                         {"num_attention_heads", 4}, {"vocab_size", 100}};
  CHECK(graph_from_hf_config(base, "x/config.json", ZooOptions{}).is_ok());
  nlohmann::json unknown = base;
  unknown["model_type"] = "xlnet";  // not in models/hf_refusals.cc: the supported list
  const std::string unknown_message = refuse(unknown);
  CHECK(unknown_message.find("llama, mistral, qwen2, qwen3, gemma, phi3, qwen, mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3, gpt2") !=
        std::string::npos);
  CHECK(unknown_message.find("layer-graph") != std::string::npos);
  CHECK(unknown_message.find("scripts/exporter/export_graph.py") != std::string::npos);
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
  CHECK(refuse(nlohmann::json{{"_class_name", "UNet2DModel"}}).find("diffusers") !=
        std::string::npos);
  CHECK(refuse(nlohmann::json{{"_class_name", "FluxTransformer2DModel"}, {"num_layers", 0}})
            .find("num_layers") != std::string::npos);
  CHECK(refuse(nlohmann::json{{"model_type", "llava"}}).find("vision_config") != std::string::npos);
  CHECK(refuse(nlohmann::json{{"model_type", "llava"},
                              {"vision_config", nlohmann::json::object()},
                              {"text_config", {{"hidden_size", "big"}}}})
            .find("text_config.hidden_size") != std::string::npos);
  CHECK(refuse(nlohmann::json{{"model_type", "clip"}, {"vision_config", {{"patch_size", 30}}}})
            .find("vision_config.patch_size") != std::string::npos);
  CHECK(refuse(nlohmann::json{{"model_type", "gpt_neox"},
                              {"hidden_size", 64},
                              {"num_hidden_layers", 1},
                              {"num_attention_heads", 4},
                              {"vocab_size", 10},
                              {"rotary_pct", 1.5}})
            .find("rotary_pct") != std::string::npos);
  CHECK(refuse(nlohmann::json{{"model_type", "opt"}, {"activation_function", "swish"}})
            .find("activation_function") != std::string::npos);
  // Sizes that would overflow or take forever to build are refused, not built.
  nlohmann::json deep = base;
  deep["num_hidden_layers"] = 1'000'000;
  CHECK(refuse(deep).find("num_hidden_layers") != std::string::npos);
  nlohmann::json wide = base;
  wide["intermediate_size"] = int64_t{1} << 40;
  CHECK(refuse(wide).find("intermediate_size") != std::string::npos);
  CHECK(refuse(nlohmann::json{{"model_type", "vit"}, {"image_size", 1 << 20}, {"patch_size", 1}})
            .find("image_size") != std::string::npos);
  CHECK(refuse(nlohmann::json{{"_class_name", "FluxTransformer2DModel"},
                              {"num_attention_heads", 1 << 20},
                              {"attention_head_dim", 1 << 20}})
            .find("attention_head_dim") != std::string::npos);
  nlohmann::json bad_dtype = base;
  bad_dtype["torch_dtype"] = "float64";
  CHECK(refuse(bad_dtype).find("torch_dtype") != std::string::npos);
  CHECK(refuse(nlohmann::json::array()).find("(top level)") != std::string::npos);
  CHECK_FALSE(load_hf_model("/nonexistent/dir/config.json", ZooOptions{}).is_ok());
}

TEST_CASE("a context past what int64 sizes hold is priced up to the longest length that does (issue 37)") {
  std::ifstream in(kData + "llama-3.2-1b/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["max_position_embeddings"] = 1048576;
  Result<graph::LayerGraph> g = graph_from_hf_config(config, "long/config.json", ZooOptions{});
  REQUIRE_MESSAGE(g.is_ok(), g.message());
  const int64_t longest = g->sequence.max_seq;
  CHECK(longest > 500000);
  CHECK(longest < 1048576);
  CHECK(g->description.find("priced up to " + std::to_string(longest) + " of its 1048576 positions") !=
        std::string::npos);
  // The longest is exact: one token more overflows at batch 1024.
  graph::LayerGraph longer = g.value();
  longer.sequence.max_seq = longest + 1;
  CHECK_FALSE(graph::validate_graph(longer, "x").is_ok());
  // The public config, well inside int64, keeps its own maximum.
  config["max_position_embeddings"] = 131072;
  Result<graph::LayerGraph> kept = graph_from_hf_config(config, "long/config.json", ZooOptions{});
  REQUIRE(kept.is_ok());
  CHECK(kept->sequence.max_seq == 131072);
  CHECK(kept->description.find("priced up to") == std::string::npos);
}

}  // namespace headroom::models

TEST_CASE("fuzz regressions: config.json inputs fail cleanly") {
  const std::filesystem::path dir =
      std::filesystem::path(HEADROOM_SOURCE_DIR) / "tests/data/fuzz_regressions/fuzz_hf_config";
  int replayed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const auto json = headroom::graph::parse_json_text(buffer.str(), "config.json");
    if (json.is_ok())
      (void)headroom::models::graph_from_hf_config(json.value(), "config.json",
                                                   headroom::models::ZooOptions{});
    ++replayed;
  }
  CHECK(replayed > 0);
}
