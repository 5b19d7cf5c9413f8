// The torch-free half of the executor: which plans it can train, option
// checks, and the token data (deterministic per sample, hostile files refused).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "executor/executable_model.h"
#include "executor/run.h"
#include "executor/token_data.h"
#include "planner/predict/planner.h"
#include "planner/settings/bnb_release.h"

namespace headroom::executor {
namespace {

planner::Plan plan_for(const std::string& model) {
  planner::RunSettings settings;
  settings.model = model;
  settings.gpu = "a6000";
  // One 32 px image reaches tiny-resnet's last BatchNorm as a 1x1 map: fit refuses it.
  if (model == "tiny-resnet") settings.micro_batch = 2;
  Result<planner::FitAnswer> answer = planner::fit(settings);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  return answer->as_given;
}

std::string temp_file(const std::string& name, const std::vector<unsigned char>& bytes) {
  const std::string path = "/tmp/headroom_run_checks_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

}  // namespace

TEST_CASE("the executor trains the llama and flux zoo models and refuses the others by name") {
  CHECK(executable_model("tiny-llama", "p").value().family == ModelFamily::kLlama);
  CHECK(executable_model("tiny-llama", "p").value().llama.hidden == models::kTinyLlama.hidden);
  CHECK(executable_model("flux-kontext-dev", "p").value().flux.double_blocks == 19);
  CHECK(executable_model("mistral-7b", "p").value().llama.vocab == 32000);
  Result<ExecutableModel> gpt2 = executable_model("gpt2", "plan.json");
  REQUIRE_FALSE(gpt2.is_ok());
  CHECK(gpt2.message().find("plan.json: model: \"gpt2\"") == 0);
  CHECK(gpt2.message().find("tiny-llama") != std::string::npos);
}

TEST_CASE("one row per trainable family: its zoo names resolve to it, and the refusal lists every row") {
  const std::vector<ModelFamilyInfo>& families = model_families();
  REQUIRE(families.size() == kModelFamilyCount);
  Result<ExecutableModel> gpt2 = executable_model("gpt2", "p");
  REQUIRE_FALSE(gpt2.is_ok());
  for (size_t i = 0; i < families.size(); ++i) {
    const ModelFamilyInfo& family = families[i];
    INFO(family.name);
    CHECK(family.family == static_cast<ModelFamily>(i));
    CHECK(&model_family(family.family) == &family);
    CHECK((family.hf_model_types.empty() || family.read_hf != nullptr));
    for (const auto& [name, model] : family.zoo) {
      CHECK(executable_model(name, "p").value().family == family.family);
      CHECK(gpt2.message().find(name) != std::string::npos);
    }
    for (const std::string& type : family.hf_model_types) CHECK(gpt2.message().find(type) != std::string::npos);
  }
  CHECK(gpt2.message().find("the executor trains tiny-llama, llama-3-8b, llama-3.1-8b, mistral-7b, tiny-moe, tiny-flux, "
                            "flux-kontext-dev, tiny-eva-vit, eva-vit-g, tiny-resnet, resnet-50, bert-large-uncased, "
                            "or a Hugging Face llama/mistral/qwen2, vit, llava, bert/roberta or clip model directory (") !=
        std::string::npos);
}

TEST_CASE("tiny-moe is the Llama row's decoder with experts, and an MoE config.json is refused as such") {
  const Result<ExecutableModel> moe = executable_model("tiny-moe", "p");
  REQUIRE(moe.is_ok());
  CHECK(moe->family == ModelFamily::kLlama);
  CHECK(moe->llama.moe.experts == models::kTinyMoe.moe.experts);
  CHECK(moe->llama.moe.top_k == 2);
  const Result<ExecutableModel> qwen3 =
      executable_model(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen3-30b-a3b", "p");
  REQUIRE_FALSE(qwen3.is_ok());
  CHECK(qwen3.message().find("is a mixture of experts (model_type \"qwen3_moe\")") != std::string::npos);
  CHECK(qwen3.message().find("tiny-moe") != std::string::npos);
}

TEST_CASE("a T5 config.json and the Flan-T5 zoo names are refused as encoder-decoders the executor does not train") {
  for (const std::string& model : {std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/flan-t5-base",
                                   std::string("flan-t5-xl"), std::string("t5-base")}) {
    const Result<ExecutableModel> t5 = executable_model(model, "p");
    REQUIRE_FALSE(t5.is_ok());
    CHECK(t5.code() == StatusCode::kUnsupported);
    CHECK(t5.message().find("is an encoder-decoder (T5 / Flan-T5), which the planner prices but the executor does "
                            "not train") != std::string::npos);
  }
}

// The executor's MoE block is transformers 5.x's fused experts (models/torch/moe_module.h):
// a plan priced for 4.x's expert Linears (models/moe_loop.h) is refused by name.
TEST_CASE("a tiny-moe plan priced for transformers 4.x experts is refused, 5.x and unpinned run") {
  planner::Plan plan = plan_for("tiny-moe");
  CHECK(check_executable(plan, "plan.json").is_ok());
  planner::Plan fused = plan;
  fused.settings.versions["transformers"] = "5.23.0";
  CHECK(check_executable(fused, "plan.json").is_ok());
  planner::Plan loop = plan;
  loop.settings.versions["transformers"] = "4.44.2";
  const Status refused = check_executable(loop, "plan.json");
  CHECK(refused.message().find("plan.json: settings.versions") == 0);
  CHECK(refused.message().find("nn.Linear") != std::string::npos);
  planner::Plan dense = plan_for("tiny-llama");  // no experts: any release runs
  dense.settings.versions["transformers"] = "4.44.2";
  CHECK(check_executable(dense, "plan.json").is_ok());
}

TEST_CASE("Hugging Face llama configs map onto the decoder, features it lacks are refused") {
  const std::string dir = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";
  Result<ExecutableModel> mistral = executable_model(dir + "mistral-7b", "p");
  REQUIRE(mistral.is_ok());
  CHECK(mistral->llama.kv_heads == 8);
  CHECK(mistral->llama.intermediate == 14336);
  Result<ExecutableModel> qwen3 = executable_model(dir + "qwen3-0.6b", "p");
  REQUIRE_FALSE(qwen3.is_ok());
  CHECK(qwen3.message().find("model_type \"qwen3\"") != std::string::npos);
  Result<ExecutableModel> gpt2 = executable_model(dir + "gpt2-medium/config.json", "p");
  REQUIRE_FALSE(gpt2.is_ok());
  CHECK(gpt2.message().find("model_type \"gpt2\"") != std::string::npos);
  CHECK(executable_model(dir + "no-such-model", "p").message().find("no such file or directory") != std::string::npos);

  // A hostile config.json gets the shared parse's refusal, naming the file.
  const std::string deep = "/tmp/headroom_run_checks_" + std::to_string(::getpid()) + "_deep";
  std::filesystem::create_directories(deep);
  std::ofstream(deep + "/config.json") << "{\"model_type\": \"llama\", \"x\": " << std::string(5000, '[')
                                       << std::string(5000, ']') << "}";
  Result<ExecutableModel> nested = executable_model(deep, "p");
  REQUIRE_FALSE(nested.is_ok());
  CHECK(nested.message() == deep + "/config.json: JSON nested deeper than 64 levels (expected a flatter file)");
  std::filesystem::remove_all(deep);
}

TEST_CASE("Hugging Face BERT and RoBERTa configs map onto the BERT module as the planner reads them") {
  const std::string dir = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";
  // google-bert/bert-base-uncased config.json: 768 hidden, 12 layers, layer_norm_eps 1e-12, pad_token_id 0.
  Result<ExecutableModel> bert = executable_model(dir + "bert-base-uncased/config.json", "p");
  REQUIRE(bert.is_ok());
  CHECK(bert->family == ModelFamily::kBert);
  CHECK(bert->bert.hidden == 768);
  CHECK(bert->bert.layers == 12);
  CHECK(std::string(bert->bert.prefix) == "bert");
  CHECK_FALSE(bert->bert.roberta_head);
  CHECK(bert->bert.layer_norm_eps == 1e-12);
  CHECK(bert->bert.pad_token == 0);
  // FacebookAI/roberta-base config.json: layer_norm_eps 1e-05, pad_token_id 1, type_vocab_size 1.
  Result<ExecutableModel> roberta = executable_model(dir + "roberta-base", "p");
  REQUIRE(roberta.is_ok());
  CHECK(std::string(roberta->bert.prefix) == "roberta");
  CHECK(roberta->bert.roberta_head);
  CHECK(roberta->bert.layer_norm_eps == 1e-5);
  CHECK(roberta->bert.pad_token == 1);
  CHECK(roberta->bert.token_types == 1);
  CHECK(roberta->bert.positions == 514);

  // An activation or position embedding the module does not run is refused.
  const std::string other = "/tmp/headroom_run_checks_" + std::to_string(::getpid()) + "_bert";
  std::filesystem::create_directories(other);
  std::ofstream(other + "/config.json") << R"({"model_type": "bert", "hidden_act": "gelu_new"})";
  Result<ExecutableModel> gelu_new = executable_model(other, "p");
  REQUIRE_FALSE(gelu_new.is_ok());
  CHECK(gelu_new.message().find("hidden_act other than gelu") != std::string::npos);
  std::ofstream(other + "/config.json") << R"({"model_type": "bert", "position_embedding_type": "relative_key"})";
  CHECK_FALSE(executable_model(other, "p").is_ok());
  std::ofstream(other + "/config.json") << R"({"model_type": "bert", "pad_token_id": 40000})";
  Result<ExecutableModel> pad = executable_model(other, "p");
  REQUIRE_FALSE(pad.is_ok());
  CHECK(pad.message().find("pad_token_id") != std::string::npos);
  std::filesystem::remove_all(other);
}

TEST_CASE("Hugging Face CLIPModel configs map onto the CLIP module, the vision model alone and SigLIP are refused") {
  const std::string dir = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";
  // openai/clip-vit-base-patch32 config.json: projection_dim 512, text 512 wide with 77
  // positions and eos_token_id 2 (the highest id pools), vision 768 wide, 224 px, patch 32.
  Result<ExecutableModel> clip = executable_model(dir + "clip-vit-base-patch32", "p");
  REQUIRE(clip.is_ok());
  CHECK(clip->family == ModelFamily::kClip);
  CHECK(clip->image == 224);
  CHECK(clip->clip.config.projection_dim == 512);
  CHECK(clip->clip.config.text_tokens == 77);
  CHECK(clip->clip.config.vision.hidden == 768);
  CHECK(clip->clip.eos_token == 2);
  Result<ExecutableModel> siglip = executable_model(dir + "siglip-base-patch16-224", "p");
  REQUIRE_FALSE(siglip.is_ok());
  CHECK(siglip.message().find("model_type \"siglip\"") != std::string::npos);
  const std::string other = "/tmp/headroom_run_checks_" + std::to_string(::getpid()) + "_clip";
  std::filesystem::create_directories(other);
  std::ofstream(other + "/config.json") << R"({"model_type": "clip", "text_config": {"hidden_act": "gelu"}})";
  Result<ExecutableModel> gelu = executable_model(other, "p");
  REQUIRE_FALSE(gelu.is_ok());
  CHECK(gelu.message().find("quick_gelu") != std::string::npos);
  std::ofstream(other + "/config.json") << R"({"model_type": "clip", "text_config": {"eos_token_id": 60000}})";
  Result<ExecutableModel> eos = executable_model(other, "p");
  REQUIRE_FALSE(eos.is_ok());
  CHECK(eos.message().find("eos_token_id") != std::string::npos);
  std::filesystem::remove_all(other);
}

TEST_CASE("check_executable refuses what the trainer cannot apply, naming the field") {
  planner::Plan plan = plan_for("tiny-llama");
  CHECK(check_executable(plan, "plan.json").is_ok());

  // Several ranks (issue 11): data parallel and ZeRO-1/2 with AdamW run; what
  // they do not partition, or hybrid sharding, is refused naming the field.
  planner::Plan two_gpus = plan;
  two_gpus.settings.gpus_per_node = 2;
  CHECK(check_executable(two_gpus, "plan.json").is_ok());
  two_gpus.config.zero_stage = 2;
  CHECK(check_executable(two_gpus, "plan.json").is_ok());
  two_gpus.settings.optimizer = planner::OptimizerKind::kSgdMomentum;
  CHECK(check_executable(two_gpus, "plan.json").message().find("plan.json: settings.optimizer") == 0);
  two_gpus.config.zero_stage = 0;
  CHECK(check_executable(two_gpus, "plan.json").is_ok());  // every optimizer runs data parallel
  two_gpus.settings.optimizer = planner::OptimizerKind::kAdamW;
  two_gpus.config.offload_optimizer = planner::Offload::kCpu;
  CHECK(check_executable(two_gpus, "plan.json").message().find("plan.json: config.zero_stage") == 0);
  two_gpus.config.offload_optimizer = planner::Offload::kNone;
  two_gpus.settings.gpus_per_node = 4;
  two_gpus.settings.shard_gpus = 2;
  CHECK(check_executable(two_gpus, "plan.json").message().find("plan.json: settings.shard_gpus") == 0);

  planner::Plan qlora = plan;  // NF4 bases are trained (models/torch/nf4.h)
  qlora.settings.mode = planner::TrainMode::kQlora;
  CHECK(check_executable(qlora, "plan.json").is_ok());

  // AdamW, 8-bit AdamW, SGD and Adafactor run (executor/optimizer.h); torchao's
  // 4-bit AdamW does not, and only AdamW is offloaded to the CPU.
  for (planner::OptimizerKind kind : {planner::OptimizerKind::kAdamW8bit, planner::OptimizerKind::kSgdMomentum,
                                      planner::OptimizerKind::kAdafactor}) {
    planner::Plan other = plan;
    other.settings.optimizer = kind;
    CHECK(check_executable(other, "plan.json").is_ok());
    other.config.offload_optimizer = planner::Offload::kCpu;
    CHECK(check_executable(other, "plan.json").message().find("plan.json: config.offload_optimizer") == 0);
  }
  for (planner::OptimizerKind kind : {planner::OptimizerKind::kAdamW4bit, planner::OptimizerKind::kAdamW8bitTorchao,
                                      planner::OptimizerKind::kSgd}) {
    planner::Plan priced_only = plan;
    priced_only.settings.optimizer = kind;
    CHECK(check_executable(priced_only, "plan.json").message().find("plan.json: settings.optimizer") == 0);
  }

  // ZeRO-3 runs as DeepSpeed's stage 3, with AdamW, on Llama, Flux and ViT; torch's
  // FSDPs, other optimizers, QLoRA and parameter offload are refused by name.
  planner::Plan zero3 = plan;
  zero3.config.zero_stage = 3;
  zero3.settings.gpus_per_node = 2;
  CHECK(check_executable(zero3, "plan.json").is_ok());
  zero3.config.offload_optimizer = planner::Offload::kCpu;
  CHECK(check_executable(zero3, "plan.json").is_ok());
  for (planner::Sharding fsdp : {planner::Sharding::kFsdp1, planner::Sharding::kFsdp2}) {
    planner::Plan other = zero3;
    other.settings.sharding = fsdp;
    const std::string message = check_executable(other, "plan.json").message();
    CHECK(message.find("plan.json: settings.sharding") == 0);
    CHECK(message.find(fsdp == planner::Sharding::kFsdp1 ? "FSDP1" : "FSDP2") != std::string::npos);
    // FSDP at ZeRO-2 (no reshard after forward) is priced as FSDP, so it is refused too.
    other.config.zero_stage = 2;
    CHECK(check_executable(other, "plan.json").message().find("plan.json: settings.sharding") == 0);
  }
  planner::Plan zero3_sgd = zero3;
  zero3_sgd.config.offload_optimizer = planner::Offload::kNone;
  zero3_sgd.settings.optimizer = planner::OptimizerKind::kSgdMomentum;
  CHECK(check_executable(zero3_sgd, "plan.json").message().find("plan.json: settings.optimizer") == 0);
  planner::Plan zero3_qlora = zero3;
  zero3_qlora.settings.mode = planner::TrainMode::kQlora;
  CHECK(check_executable(zero3_qlora, "plan.json").message().find("plan.json: settings.mode") == 0);
  planner::Plan param_offload = zero3;
  param_offload.config.offload_param = planner::Offload::kCpu;
  CHECK(check_executable(param_offload, "plan.json").message().find("plan.json: config.offload_param") == 0);
  planner::Plan resnet = plan_for("tiny-resnet");
  resnet.config.zero_stage = 3;
  CHECK(check_executable(resnet, "plan.json").message().find("plan.json: config.zero_stage: ResNet") == 0);
  planner::Plan eva = plan_for("tiny-eva-vit");  // the ViT module runs its embeddings and head as blocks
  eva.config.zero_stage = 3;
  eva.settings.gpus_per_node = 2;
  CHECK(check_executable(eva, "plan.json").is_ok());

  planner::Plan nvme = plan;
  nvme.config.offload_optimizer = planner::Offload::kNvme;
  CHECK(check_executable(nvme, "plan.json").message().find("NVMe") != std::string::npos);

  // Stack mechanisms the trainer does not implement (issue 10): named, not mispredicted.
  planner::Plan selective = plan;
  selective.settings.recompute = planner::Recompute::kSelectiveOp;
  selective.blocks[1] = planner::BlockChoice::kCheckpoint;
  CHECK(check_executable(selective, "plan.json").message().find("plan.json: settings.recompute") == 0);
  planner::Plan offload_inputs = plan;
  offload_inputs.settings.offload_checkpoint_inputs = true;
  CHECK(check_executable(offload_inputs, "plan.json").message().find("settings.offload_checkpoint_inputs") !=
        std::string::npos);
  planner::Plan compiled = plan;
  compiled.settings.compile = true;
  CHECK(check_executable(compiled, "plan.json").message().find("settings.compile") != std::string::npos);
  planner::Plan fp8 = plan;
  fp8.settings.float8 = planner::Float8Recipe::kTensorwise;
  CHECK(check_executable(fp8, "plan.json").message().find("plan.json: settings.float8") == 0);
  planner::Plan gptq = plan;
  gptq.settings.quant = planner::QuantFormat::kGptq;
  CHECK(check_executable(gptq, "plan.json").message().find("plan.json: settings.quant") == 0);
  planner::Plan torchao = plan;
  torchao.config.offload_optimizer = planner::Offload::kCpu;
  torchao.settings.cpu_offload = planner::CpuOffloadImpl::kTorchao;
  CHECK(check_executable(torchao, "plan.json").message().find("plan.json: settings.cpu_offload") == 0);
  planner::Plan flex = plan;
  flex.settings.attention = models::AttentionImpl::kFlex;
  CHECK(check_executable(flex, "plan.json").message().find("plan.json: settings.attention") == 0);
  planner::Plan triton = plan;
  triton.settings.attention = models::AttentionImpl::kTritonFlash;
  CHECK(check_executable(triton, "plan.json").message().find("plan.json: settings.attention") == 0);
  planner::Plan paged = plan;
  paged.settings.paged_optimizer = true;
  CHECK(check_executable(paged, "plan.json").message().find("settings.paged_optimizer") != std::string::npos);
  planner::Plan amp = plan;
  amp.settings.precision = planner::Precision::kBf16Amp;
  CHECK(check_executable(amp, "plan.json").message().find("settings.precision") != std::string::npos);
  // The Trainer's QLoRA leaves PEFT's upcast open; the executor trains the weights as loaded.
  planner::Plan prepared = plan;
  prepared.settings.mode = planner::TrainMode::kQlora;
  prepared.settings.precision = planner::Precision::kBf16Pure;
  prepared.settings.stack = planner::Stack::kHfTrainer;
  CHECK(check_executable(prepared, "plan.json").message().find("plan.json: settings.kbit_prep: peft") == 0);
  prepared.settings.kbit_prep = planner::KbitPrep::kNone;
  CHECK(check_executable(prepared, "plan.json").message().find("kbit_prep") == std::string::npos);
  // QLoRA under autocast on a LayerNorm model: its attention would take the 4-bit
  // linears' fp32 outputs uncast. Refused by name; without autocast it runs.
  planner::Plan flux_qlora = plan_for("tiny-flux");
  flux_qlora.settings.mode = planner::TrainMode::kQlora;
  flux_qlora.settings.precision = planner::Precision::kBf16Pure;
  flux_qlora.settings.stack = planner::Stack::kHfTrainer;
  flux_qlora.settings.kbit_prep = planner::KbitPrep::kNone;
  CHECK(check_executable(flux_qlora, "plan.json").message().find("plan.json: settings.autocast") == 0);
  flux_qlora.settings.autocast = false;
  CHECK(check_executable(flux_qlora, "plan.json").message().find("settings.autocast") == std::string::npos);
  planner::Plan chunked = plan;
  chunked.settings.stack = planner::Stack::kTorchtune;
  CHECK(check_executable(chunked, "plan.json").message().find("plan.json: settings.loss: chunked:8") == 0);

  // The trainer frees the gradients after the step: a plain loop's open zero_grad is
  // run as that, a loop that keeps them through the forward is refused by name.
  planner::Plan loop = plan;
  loop.settings.stack = planner::Stack::kTorchAmp;
  CHECK(check_executable(loop, "plan.json").message().find("grads_through_forward") == std::string::npos);
  loop.settings.grads_through_forward = true;
  CHECK(check_executable(loop, "plan.json").message().find("plan.json: settings.grads_through_forward") == 0);

  // An open bitsandbytes release is run as the current one: the executor's 4-bit
  // linear keeps no input (the band's bottom), so its prediction is that run's.
  planner::Plan open_release = plan;
  open_release.settings.mode = planner::TrainMode::kQlora;
  CHECK(as_executor_runs(open_release).settings.versions.count("bitsandbytes") == 1);
  CHECK_FALSE(planner::bnb_regime(as_executor_runs(open_release).settings).keeps_input);
  open_release.settings.versions["bitsandbytes"] = "0.43.1";
  CHECK(as_executor_runs(open_release).settings.versions.at("bitsandbytes") == "0.43.1");

  planner::Plan torn = plan;
  torn.block_names.pop_back();
  CHECK(check_executable(torn, "plan.json").message().find("plan.json: blocks") == 0);

  // A one-token sequence has no next token to predict: its loss is NaN (issue 14).
  planner::Plan one_token = plan;
  one_token.seq_len = 1;
  CHECK(check_executable(one_token, "plan.json").message() ==
        "plan.json: seq_len: a causal language model needs at least 2 tokens per sequence (each token predicts "
        "the next), got 1");
  one_token.seq_len = 2;
  CHECK(check_executable(one_token, "plan.json").is_ok());
}

TEST_CASE("run options are validated with the flag named") {
  RunOptions ok;
  CHECK(validate_run_options(ok, "command line").is_ok());
  RunOptions o = ok;
  o.steps = 0;
  CHECK(validate_run_options(o, "command line").message() == "command line: --steps: at least 1");
  o = ok;
  o.token_bytes = 3;
  CHECK(validate_run_options(o, "c").message().find("--token-bytes") != std::string::npos);
  o = ok;
  o.learning_rate = std::nan("");
  CHECK(validate_run_options(o, "c").message().find("--lr") != std::string::npos);
  o = ok;
  o.device = "tpu";
  CHECK(validate_run_options(o, "c").message().find("--device") != std::string::npos);
  o = ok;
  o.checkpoint_every = 5;
  CHECK(validate_run_options(o, "c").message().find("--checkpoint-dir") != std::string::npos);
  o = ok;
  o.checkpoints_kept = 0;
  CHECK(validate_run_options(o, "c").message().find("--keep") != std::string::npos);
}

TEST_CASE("category errors are relative to the measurement") {
  CHECK(CategoryCheck{"x", 105, 100}.relative_error() == doctest::Approx(0.05));
  CHECK(CategoryCheck{"x", 95, 100}.relative_error() == doctest::Approx(-0.05));
  CHECK(CategoryCheck{"x", 0, 0}.relative_error() == 0.0);
  CHECK(CategoryCheck{"x", 10, 0}.relative_error() == 1.0);
}

TEST_CASE("synthetic tokens are arithmetic progressions, deterministic in the sample index") {
  const TokenSource a = TokenSource::synthetic(256, 7);
  const TokenSource b = TokenSource::synthetic(256, 7);
  const std::vector<int64_t> s = a.sample(41, 64).value();
  CHECK(s == b.sample(41, 64).value());
  CHECK(s != a.sample(42, 64).value());
  CHECK(s != TokenSource::synthetic(256, 8).sample(41, 64).value());
  const int64_t stride = (s[1] - s[0] + 256) % 256;
  for (size_t t = 1; t < s.size(); ++t) {
    CHECK(s[t] >= 0);
    CHECK(s[t] < 256);
    CHECK((s[t] - s[t - 1] + 256) % 256 == stride);
  }
}

TEST_CASE("token files: little-endian ids, windows by sample index, hostile files refused") {
  // ids 0..9 as uint16 little-endian.
  std::vector<unsigned char> u16;
  for (int i = 0; i < 10; ++i) {
    u16.push_back(static_cast<unsigned char>(i));
    u16.push_back(0);
  }
  const std::string path16 = temp_file("u16.bin", u16);
  Result<TokenSource> file = TokenSource::open_file(path16, 2, 100, 4);
  REQUIRE(file.is_ok());
  CHECK(file->file_tokens() == 10);
  CHECK(file->sample(0, 4).value() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(file->sample(1, 4).value() == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(file->sample(2, 4).value() == std::vector<int64_t>{1, 2, 3, 4});  // 8 mod 7 windows

  // uint32 with a high byte set: 0x00010002 = 65538.
  const std::string path32 = temp_file("u32.bin", {2, 0, 1, 0, 3, 0, 0, 0});
  Result<TokenSource> wide = TokenSource::open_file(path32, 4, 70000, 2);
  REQUIRE(wide.is_ok());
  CHECK(wide->sample(0, 2).value() == std::vector<int64_t>{65538, 3});

  // An id past the vocabulary is found when the file is opened, before any
  // training (issue 14), wherever it is in the file.
  Result<TokenSource> small_vocab = TokenSource::open_file(path32, 4, 1000, 2);
  REQUIRE_FALSE(small_vocab.is_ok());
  CHECK(small_vocab.message().find(path32 + ": token 0 is 65538") == 0);
  CHECK(small_vocab.message().find("vocabulary size 1000") != std::string::npos);
  std::vector<unsigned char> many(2 * 600'000, 0);
  many[many.size() - 2] = 0xff;  // the last of 600k uint16 ids is 255, past a vocabulary of 100
  const std::string late = temp_file("late.bin", many);
  Result<TokenSource> late_bad = TokenSource::open_file(late, 2, 100, 4);
  REQUIRE_FALSE(late_bad.is_ok());
  CHECK(late_bad.message().find(late + ": token 599999 is 255") == 0);
  CHECK(TokenSource::open_file(late, 2, 256, 4).is_ok());
  std::remove(late.c_str());
  const std::string fifo = temp_file("fifo.bin", {});
  std::remove(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(TokenSource::open_file(fifo, 2, 100, 1).message() == fifo + ": is a FIFO (expected a regular file)");
  std::remove(fifo.c_str());

  const std::string odd = temp_file("odd.bin", {1, 2, 3});
  CHECK(TokenSource::open_file(odd, 2, 100, 1).message().find("not a whole number of 2-byte") != std::string::npos);
  CHECK(TokenSource::open_file(path16, 2, 100, 11).message().find("at least one sequence of 11") !=
        std::string::npos);
  CHECK(TokenSource::open_file("/nonexistent/tokens.bin", 2, 100, 1).message().find("/nonexistent/tokens.bin") == 0);
  CHECK(TokenSource::open_file("/tmp", 2, 100, 1).message().find("regular file") != std::string::npos);
  for (const std::string& p : {path16, path32, odd}) std::remove(p.c_str());
}

#if HEADROOM_LIBTORCH_BUILT
TEST_CASE("a build with LibTorch has the executor") {
  // Training itself is tested in tests/executor/torch; here, that the build which
  // compiled the trainer does not answer as a planner-only build would.
  CHECK(executor_available());
}
#else
TEST_CASE("without LibTorch, train_plan says how to get the executor") {
  REQUIRE_FALSE(executor_available());
  RunObserver observer;
  Result<RunResult> r = train_plan(plan_for("tiny-llama"), RunOptions{}, observer);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.message().find("scripts/setup_torch.sh") != std::string::npos);
}
#endif

}  // namespace headroom::executor
