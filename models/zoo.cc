#include "models/zoo.h"

#include <utility>

#include "models/deepseek.h"
#include "models/flux.h"
#include "models/gemma.h"
#include "models/llama.h"
#include "models/qwen2_5_vl.h"
#include "models/t5.h"
#include "models/resnet.h"
#include "models/sd3.h"
#include "models/sdxl_unet.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

void add_t5_entries(std::vector<ZooEntry>& zoo);
void add_sd3_entries(std::vector<ZooEntry>& zoo);
void add_sdxl_entries(std::vector<ZooEntry>& zoo);

using Builder = graph::LayerGraph (*)(const ZooOptions&);

struct Metadata {
  const char* name;
  const char* family;
  const char* description;
  const char* source;
  graph::SequenceSpec sequence;
  std::vector<std::string> lora_targets;
};

graph::SequenceSpec token_sequence(int64_t default_seq, int64_t max_seq) {
  graph::SequenceSpec spec;
  spec.unit = "tokens";
  spec.default_seq = default_seq;
  spec.max_seq = max_seq;
  return spec;
}

// S = images * (resolution / patch_px)^2 + extra_tokens.
graph::SequenceSpec image_sequence(int64_t patch_px, int64_t images, int64_t extra_tokens,
                                   int64_t default_resolution, int64_t max_resolution) {
  graph::SequenceSpec spec;
  spec.unit = "image";
  spec.patch_px = patch_px;
  spec.images = images;
  spec.extra_tokens = extra_tokens;
  spec.default_resolution = default_resolution;
  const int64_t side = default_resolution / patch_px;
  const int64_t max_side = max_resolution / patch_px;
  spec.default_seq = images * side * side + extra_tokens;
  spec.max_seq = images * max_side * max_side + extra_tokens;
  return spec;
}

ZooEntry entry(Metadata meta, std::function<graph::LayerGraph(const ZooOptions&)> build) {
  ZooEntry out;
  out.name = meta.name;
  out.description = meta.description;
  out.build = [meta = std::move(meta), build = std::move(build)](const ZooOptions& options) {
    graph::LayerGraph graph = build(options);
    graph.name = meta.name;
    graph.family = meta.family;
    graph.description = meta.description;
    graph.source = meta.source;
    graph.sequence = meta.sequence;
    graph.lora_targets = meta.lora_targets;
    return graph;
  };
  return out;
}

const std::vector<std::string> kLlamaLora = {"q_proj", "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};

std::vector<ZooEntry> make_zoo() {
  std::vector<ZooEntry> zoo;
  zoo.push_back(entry(
      {"llama-3-8b", "llama", "Meta Llama 3 8B (GQA, SwiGLU, RoPE), 8.03B parameters",
       "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
       token_sequence(2048, 8192), kLlamaLora},
      [](const ZooOptions& o) { return build_llama(kLlama3_8b, o); }));
  zoo.push_back(entry(
      {"llama-3.1-8b", "llama", "Meta Llama 3.1 8B, 128k context, 8.03B parameters",
       "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
       token_sequence(2048, 131072), kLlamaLora},
      [](const ZooOptions& o) { return build_llama(kLlama31_8b, o); }));
  zoo.push_back(entry(
      {"qwen-7b", "qwen", "Qwen-7B (original QWenLMHeadModel, MHA, fused c_attn), 7.72B parameters",
       "https://huggingface.co/Qwen/Qwen-7B/blob/main/config.json", token_sequence(2048, 8192),
       {"c_attn", "c_proj", "w1", "w2"}},
      build_qwen_7b));
  zoo.push_back(entry(
      {"mistral-7b", "llama", "Mistral 7B v0.1 (GQA, SwiGLU), 7.24B parameters",
       "https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json",
       token_sequence(2048, 32768), kLlamaLora},
      [](const ZooOptions& o) { return build_llama(kMistral7b, o); }));
  zoo.push_back(entry(
      {"gemma-2-9b", "gemma2",
       "Google Gemma 2 9B (GQA, GeGLU, sliding window on every other layer, soft-capped attention and logits, "
       "256k vocabulary), 9.24B parameters",
       "https://huggingface.co/google/gemma-2-9b/blob/main/config.json", token_sequence(2048, 8192), kLlamaLora},
      [](const ZooOptions& o) { return build_gemma(gemma2_9b_config(), o); }));
  zoo.push_back(entry(
      {"gemma-3-12b", "gemma3_text",
       "Google Gemma 3 12B, its language model (QK-norm, 5 sliding-window layers to 1 global, 262k vocabulary), "
       "11.77B parameters",
       "https://huggingface.co/google/gemma-3-12b-pt/blob/main/config.json (text_config)",
       token_sequence(2048, 131072), kLlamaLora},
      [](const ZooOptions& o) { return build_gemma(gemma3_12b_text_config(), o); }));
  // Mixture of experts: LoRA on the attention projections (the experts are 3-D
  // parameters PEFT cannot wrap as Linear; models/moe.h).
  zoo.push_back(entry(
      {"mixtral-8x7b", "mixtral", "Mixtral 8x7B v0.1 (8 experts, top-2), 46.7B parameters, 12.9B active",
       "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
       token_sequence(2048, 32768), {"q_proj", "k_proj", "v_proj", "o_proj"}},
      [](const ZooOptions& o) { return build_llama(kMixtral8x7b, o); }));
  zoo.push_back(entry(
      {"qwen3-30b-a3b", "qwen3_moe", "Qwen3-30B-A3B (128 experts, top-8), 30.5B parameters, 3.3B active",
       "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
       token_sequence(2048, 40960), {"q_proj", "k_proj", "v_proj", "o_proj"}},
      [](const ZooOptions& o) { return build_llama(kQwen3_30bA3b, o); }));
  zoo.push_back(entry(
      {"deepseek-v2-lite", "deepseek_v2",
       "DeepSeek-V2-Lite (MLA, 64 routed experts top-6 + 2 shared), 15.7B parameters, 2.4B active",
       "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json",
       token_sequence(2048, 163840), {"q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}},
      [](const ZooOptions& o) { return build_deepseek(kDeepseekV2Lite, o); }));
  zoo.push_back(entry({"gpt2", "gpt2", "GPT-2 small, 124M parameters, tied embeddings",
                       "https://huggingface.co/openai-community/gpt2/blob/main/config.json",
                       token_sequence(1024, 1024), {"c_attn", "c_proj", "c_fc"}},
                      build_gpt2));
  zoo.push_back(entry({"mpt-7b", "mpt",
                       "MosaicML MPT-7B (ALiBi, no biases, low-precision LayerNorm, tied), 6.65B parameters",
                       "https://huggingface.co/mosaicml/mpt-7b/blob/main/config.json; llm-foundry "
                       "llmfoundry/models/mpt/modeling_mpt.py",
                       token_sequence(2048, 2048), {"Wqkv", "out_proj", "up_proj", "down_proj"}},
                      build_mpt_7b));
  zoo.push_back(entry(
      {"llava-llama-3-8b", "llava",
       "LLaVA with CLIP ViT-L/14-336 and Llama-3-8B-Instruct; S includes 576 image tokens",
       "https://huggingface.co/xtuner/llava-llama-3-8b-v1_1-transformers (config.json); "
       "https://huggingface.co/openai/clip-vit-large-patch14-336 (config.json)",
       token_sequence(2048, 8192), kLlamaLora},
      build_llava_llama3_8b));
  // Qwen2.5-VL: the image side (--resolution) changes the graph and S's image share,
  // so its sequence spec comes from the build (set_qwen25vl_metadata), not from here.
  ZooEntry qwen_vl;
  qwen_vl.name = "qwen2.5-vl-7b";
  qwen_vl.description =
      "Qwen2.5-VL-7B-Instruct (windowed ViT 0.68B + Qwen2 7.6B), 8.29B parameters; S includes the image tokens "
      "(256 at the default 448 px, --resolution to change)";
  qwen_vl.build = [description = qwen_vl.description](const ZooOptions& o) {
    const Qwen25VlConfig config = qwen25vl_7b_config(o);
    graph::LayerGraph graph = build_qwen25vl(config, o);
    set_qwen25vl_metadata(graph, config);
    graph.name = "qwen2.5-vl-7b";
    graph.description = description;
    graph.source = "https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json";
    return graph;
  };
  zoo.push_back(std::move(qwen_vl));
  add_t5_entries(zoo);
  zoo.push_back(entry(
      {"flux-kontext-dev", "flux",
       "FLUX.1 Kontext [dev] transformer (19 double + 38 single blocks), 11.9B parameters",
       "https://huggingface.co/black-forest-labs/FLUX.1-Kontext-dev/blob/main/transformer/"
       "config.json; diffusers FluxTransformer2DModel",
       image_sequence(16, 2, 0, 1024, 2048), {"to_q", "to_k", "to_v", "to_out.0"}},
      build_flux_kontext));
  add_sd3_entries(zoo);
  add_sdxl_entries(zoo);
  zoo.push_back(entry(
      {"eva-vit-g", "vit", "EVA ViT-g/14 as the BLIP-2 vision encoder (39 layers), ~1.0B",
       "https://huggingface.co/Salesforce/blip2-opt-2.7b/blob/main/config.json (vision_config)",
       image_sequence(14, 1, 1, 224, 224), {"qkv", "projection", "fc1", "fc2"}},
      build_eva_vit_g));
  zoo.push_back(entry({"vit-b-16", "vit", "ViT-B/16 at 224px with the ImageNet-1k head, 86.6M",
                       "https://huggingface.co/google/vit-base-patch16-224/blob/main/config.json",
                       image_sequence(16, 1, 1, 224, 224), {"query", "key", "value", "dense"}},
                      build_vit_b16));
  zoo.push_back(entry(
      {"bert-large-uncased", "bert", "BERT-large uncased with a sequence-classification head, 335M",
       "https://huggingface.co/google-bert/bert-large-uncased/blob/main/config.json",
       token_sequence(512, 512), {"query", "key", "value", "dense"}},
      build_bert_large));
  zoo.push_back(entry(
      {"resnet-50", "resnet", "ResNet-50 (torchvision resnet50, v1.5) with BatchNorm at 224px, 25.6M",
       "https://github.com/pytorch/vision/blob/main/torchvision/models/resnet.py (resnet50: Bottleneck, "
       "[3, 4, 6, 3]); https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html",
       image_sequence(32, 1, 0, 224, 1024), {"fc"}},
      [](const ZooOptions& o) { return build_resnet(kResNet50, o); }));
  // Tiny variants that the executor trains on a CPU (tests, `headroom run`).
  zoo.push_back(entry({"tiny-llama", "llama", "Llama 3 architecture at toy size for CPU runs, 0.22M parameters",
                       "headroom (models/llama.h kTinyLlama)", token_sequence(64, 256), kLlamaLora},
                      [](const ZooOptions& o) { return build_llama(kTinyLlama, o); }));
  // Mixtral's family: the same builder, router and grouped experts as mixtral-8x7b.
  zoo.push_back(entry({"tiny-moe", "mixtral",
                       "Mixtral's structure (4 experts, top-2, every layer sparse) at toy size for CPU runs, "
                       "0.38M parameters",
                       "headroom (models/llama.h kTinyMoe)", token_sequence(64, 256),
                       {"q_proj", "k_proj", "v_proj", "o_proj"}},
                      [](const ZooOptions& o) { return build_llama(kTinyMoe, o); }));
  zoo.push_back(entry({"tiny-flux", "flux", "Flux MMDiT (2 double + 2 single blocks) at toy size for CPU runs",
                       "headroom (models/flux.h kTinyFlux)", image_sequence(16, 1, 0, 128, 256),
                       {"to_q", "to_k", "to_v", "to_out.0"}},
                      [](const ZooOptions& o) { return build_flux(kTinyFlux, o); }));
  zoo.push_back(entry({"tiny-resnet", "resnet", "ResNet (Bottleneck, [1, 1, 1, 1], width 8, 10 classes) with "
                       "BatchNorm at 32px for CPU runs", "headroom (models/resnet.h kTinyResNet)",
                       image_sequence(32, 1, 0, 32, 256), {"fc"}},
                      [](const ZooOptions& o) { return build_resnet(kTinyResNet, o); }));
  zoo.push_back(entry({"tiny-eva-vit", "vit", "EVA ViT-g's structure (BLIP-2 vision encoder, 3 layers, hidden 64) "
                       "at 32px for CPU runs", "headroom (models/vit.cc tiny_eva_vit_spec)",
                       image_sequence(8, 1, 1, 32, 32), {"qkv", "projection", "fc1", "fc2"}},
                      [](const ZooOptions& o) { return build_eva_vit_from(tiny_eva_vit_spec(), o); }));
  return zoo;
}

// T5: two lengths (--seq for the encoder, --target-seq for the decoder), so the
// build sets the sequence spec (set_t5_metadata).
void add_t5_entries(std::vector<ZooEntry>& zoo) {
  const std::pair<std::string, std::string> sizes[] = {
      {"base", "Flan-T5 base (12 + 12 layers, gated-GELU), 247.6M parameters untied"},
      {"xl", "Flan-T5 XL (24 + 24 layers, gated-GELU), 2.85B parameters untied"},
      {"xxl", "Flan-T5 XXL (24 + 24 layers, gated-GELU), 11.3B parameters untied"}};
  const std::string tied = "; transformers 5.x ties lm_head to the shared embedding (docs/models.md, \"T5\")";
  for (const auto& [size, description] : sizes) {
    ZooEntry e;
    e.name = "flan-t5-" + size;
    e.description = description + tied;
    e.build = [size, description = e.description](const ZooOptions& o) {
      graph::LayerGraph graph = build_t5(flan_t5_config(size, o), o);
      set_t5_metadata(graph);
      graph.description = description;
      graph.source = "https://huggingface.co/google/flan-t5-" + size + "/blob/main/config.json";
      return graph;
    };
    zoo.push_back(std::move(e));
  }
  ZooEntry base;
  base.name = "t5-base";
  base.description = "T5 base (the original: ReLU, lm_head tied and rescaled), 222.9M parameters";
  base.build = [description = base.description](const ZooOptions& o) {
    graph::LayerGraph graph = build_t5(t5_base_config(o), o);
    set_t5_metadata(graph);
    graph.description = description;
    graph.source = "https://huggingface.co/google-t5/t5-base/blob/main/config.json";
    return graph;
  };
  zoo.push_back(std::move(base));
}

// Stable Diffusion 3 / 3.5 transformers (models/sd3.h): S = (resolution / 16)^2
// latent patches, up to pos_embed_max_size^2; the 77 CLIP + 77 T5 text tokens
// are fixed per sample.
void add_sd3_entries(std::vector<ZooEntry>& zoo) {
  const std::vector<std::string> lora = {"attn.to_q",       "attn.to_k",       "attn.to_v",       "attn.to_out.0",
                                         "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"};
  zoo.push_back(entry({"sd3-medium", "sd3", "Stable Diffusion 3 Medium transformer (MMDiT, 24 blocks), 2.03B parameters",
                       "https://huggingface.co/stabilityai/stable-diffusion-3-medium-diffusers/blob/main/transformer/"
                       "config.json; diffusers SD3Transformer2DModel",
                       image_sequence(16, 1, 0, 1024, 192 * 16), lora},
                      [](const ZooOptions& o) { return build_sd3(sd3_medium_config(), o); }));
  zoo.push_back(entry({"sd3.5-medium", "sd3",
                       "Stable Diffusion 3.5 Medium transformer (MMDiT-X, 24 blocks, 13 with a second attention, "
                       "qk RMSNorm), 2.24B parameters",
                       "https://huggingface.co/stabilityai/stable-diffusion-3.5-medium/blob/main/transformer/"
                       "config.json; diffusers SD3Transformer2DModel",
                       image_sequence(16, 1, 0, 1024, 384 * 16), lora},
                      [](const ZooOptions& o) { return build_sd3(sd35_medium_config(), o); }));
  zoo.push_back(entry({"sd3.5-large", "sd3",
                       "Stable Diffusion 3.5 Large transformer (MMDiT, 38 blocks, qk RMSNorm), 8.06B parameters",
                       "https://huggingface.co/stabilityai/stable-diffusion-3.5-large/blob/main/transformer/"
                       "config.json; diffusers SD3Transformer2DModel",
                       image_sequence(16, 1, 0, 1024, 192 * 16), lora},
                      [](const ZooOptions& o) { return build_sd3(sd35_large_config(), o); }));
}

// Stable Diffusion XL's UNet (models/sdxl_unet.h): S = (resolution / 32)^2, the
// deepest feature map (8x VAE, two downsamplers); the 77 text tokens are fixed.
void add_sdxl_entries(std::vector<ZooEntry>& zoo) {
  zoo.push_back(entry({"sdxl-unet", "sdxl",
                       "Stable Diffusion XL base 1.0 UNet (UNet2DConditionModel, 70 transformer blocks), 2.57B "
                       "parameters",
                       "https://huggingface.co/stabilityai/stable-diffusion-xl-base-1.0/blob/main/unet/config.json; "
                       "diffusers UNet2DConditionModel",
                       image_sequence(32, 1, 0, 1024, 4096), sdxl_lora_targets()},
                      [](const ZooOptions& o) { return build_unet(sdxl_base_unet_config(), o); }));
}

}  // namespace

const std::vector<ZooEntry>& zoo_models() {
  static const std::vector<ZooEntry> zoo = make_zoo();
  return zoo;
}

Result<graph::LayerGraph> build_zoo_model(std::string_view name, const ZooOptions& options) {
  std::string names;
  for (const ZooEntry& e : zoo_models()) {
    if (e.name == name) return e.build(options);
    names += (names.empty() ? "" : ", ") + e.name;
  }
  return Status::unsupported("unknown model '" + std::string(name) +
                             "' (expected one of: " + names + ")");
}

}  // namespace headroom::models
