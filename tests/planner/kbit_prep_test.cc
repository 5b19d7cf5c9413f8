// QLoRA preparation (planner/mechanisms/kbit_prep.h, StackSpec::kbit_prep): which weights a
// script upcasts to fp32 before training, and what a bitsandbytes Linear4bit does
// with the fp32 inputs that follow (planner/mechanisms/autocast.h). Read from peft
// (utils/other.py prepare_model_for_kbit_training), TRL (peft_module_casting_to_bf16),
// bitsandbytes (nn/modules.py Linear4bit, autograd/_functions.py MatMul4Bit) and
// transformers' LlamaRMSNorm; docs/stacks.md, "QLoRA preparation".
#include <doctest/doctest.h>

#include <string>

#include "planner/mechanisms/autocast.h"
#include "planner/configs/axolotl_import.h"
#include "planner/mechanisms/kbit_prep.h"
#include "planner/configs/llamafactory_import.h"
#include "planner/predict/model_context.h"
#include "planner/memory/model_states.h"
#include "planner/mechanisms/trainability.h"
#include "tests/planner/predict_as_given.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

// Llama 3.2 1B (transformers' Python RMSNorm) with QLoRA under the Trainer's
// bf16=True over a model loaded in bf16, B = 1, S = 1024, every block checkpointed.
RunSettings trainer_qlora(std::optional<KbitPrep> prep) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "a100-80g";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kQlora;
  s.seq_len = 1024;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.kbit_prep = prep;
  // bitsandbytes from 0.47: 4-bit linears keep their compute dtype (bnb_release_test.cc holds the older)
  s.versions["bitsandbytes"] = "0.50.2";
  return s;
}

const graph::Node* find_node(const graph::LayerGraph& graph, const std::string& name) {
  for (const graph::Node& node : graph.nodes) {
    if (node.name == name) return &node;
  }
  return nullptr;
}

const graph::Tensor& find_tensor(const graph::LayerGraph& graph, const std::string& name) {
  for (const graph::Tensor& tensor : graph.tensors) {
    if (tensor.name == name) return tensor;
  }
  FAIL("no tensor " << name);
  return graph.tensors.front();
}

bool is_f32(const graph::LayerGraph& graph, const std::string& tensor) {
  return find_tensor(graph, tensor).dtype == graph::DType::kF32;
}

// The bytes of the unquantized frozen parameters (embeddings, norms, lm_head) and of the norms alone.
struct Unquantized {
  int64_t all = 0;
  int64_t norms = 0;
};
Unquantized unquantized_elements(const graph::LayerGraph& graph) {
  Unquantized out;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.trainable || param.buffer || !param.tied_to.empty() || is_quantized_storage(param.dtype) ||
          is_quantization_constant(param)) {
        continue;
      }
      out.all += param.elements();
      if (node.op == "norm") out.norms += param.elements();
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the Trainer leaves the QLoRA preparation open, axolotl and the other stacks pin it") {
  const ResolvedStack open = resolve_stack(trainer_qlora(std::nullopt));
  CHECK(open.top.kbit_prep == KbitPrep::kPeft);
  CHECK(open.bottom.kbit_prep == KbitPrep::kNone);
  int said = 0;
  for (const std::string& unknown : open.unknowns) said += unknown.find("prepare_model_for_kbit_training") != std::string::npos;
  CHECK(said == 1);
  const std::optional<RunSettings> bottom = bottom_of_band(trainer_qlora(std::nullopt));
  REQUIRE(bottom.has_value());
  CHECK(bottom->kbit_prep == KbitPrep::kNone);
  CHECK(validate_settings(*bottom, "t.json").is_ok());

  // Pinned by the user, by a stack without PEFT, or where it cannot matter.
  CHECK(resolve_stack(trainer_qlora(KbitPrep::kNormsFp32)).top.kbit_prep == KbitPrep::kNormsFp32);
  RunSettings torchtune = trainer_qlora(std::nullopt);
  torchtune.stack = Stack::kTorchtune;
  CHECK(resolve_stack(torchtune).top.kbit_prep == KbitPrep::kNone);
  for (Precision precision : {Precision::kBf16Amp, Precision::kBf16Mixed, Precision::kFp32}) {
    RunSettings other = trainer_qlora(std::nullopt);
    other.precision = precision;
    CHECK_FALSE(kbit_prep_matters(other));
    for (const std::string& unknown : resolve_stack(other).unknowns) CHECK(unknown.find("kbit") == std::string::npos);
  }
  RunSettings lora = trainer_qlora(std::nullopt);
  lora.mode = TrainMode::kLora;
  CHECK_FALSE(kbit_prep_matters(lora));
  CHECK_FALSE(bottom_of_band(lora).value().kbit_prep.has_value());
}

TEST_CASE("the QLoRA preparation is refused where it means nothing or is undone") {
  const auto refused = [](RunSettings s) { return validate_settings(s, "t.json").message(); };
  RunSettings lora = trainer_qlora(KbitPrep::kPeft);
  lora.mode = TrainMode::kLora;
  CHECK(refused(lora).find("t.json: kbit_prep: ") == 0);
  RunSettings gptq = trainer_qlora(KbitPrep::kPeft);
  gptq.quant = QuantFormat::kGptq;
  CHECK(refused(gptq).find("casts nothing in a GPTQ model") != std::string::npos);
  RunSettings mixed = trainer_qlora(KbitPrep::kNormsFp32);
  mixed.precision = Precision::kBf16Mixed;
  CHECK(refused(mixed).find("give precision bf16") != std::string::npos);
  RunSettings litgpt = trainer_qlora(KbitPrep::kPeft);
  litgpt.stack = Stack::kLitgpt;
  CHECK(refused(litgpt).find("t.json: kbit_prep: ") == 0);
  RunSettings zero = trainer_qlora(KbitPrep::kPeft);
  zero.zero_stage = 2;
  CHECK(refused(zero).find("zero_stage 2") != std::string::npos);
  CHECK(refused(zero).find("got peft") != std::string::npos);
  zero.kbit_prep.reset();
  CHECK_FALSE(kbit_prep_matters(zero));  // DeepSpeed's engine casts the module back: nothing open
  // none is always a faithful answer for QLoRA, and AMP is fp32 already.
  RunSettings none = trainer_qlora(KbitPrep::kNone);
  none.precision = Precision::kBf16Mixed;
  CHECK(validate_settings(none, "t.json").is_ok());
  RunSettings amp = trainer_qlora(KbitPrep::kPeft);
  amp.precision = Precision::kBf16Amp;
  CHECK(validate_settings(amp, "t.json").is_ok());

  // The settings file round trip.
  const nlohmann::json j = settings_to_json(trainer_qlora(KbitPrep::kNormsFp32));
  CHECK(j.at("kbit_prep") == "norms-fp32");
  Result<RunSettings> back = settings_from_json(j, "t.json");
  REQUIRE(back.is_ok());
  CHECK(back->kbit_prep == KbitPrep::kNormsFp32);
  nlohmann::json bad = j;
  bad["kbit_prep"] = "fp32";
  CHECK(settings_from_json(bad, "t.json").message().find("kbit_prep") != std::string::npos);
}

TEST_CASE("PEFT's preparation stores every unquantized weight in fp32, TRL's only the norms") {
  const ModelContext none = prepared_context(trainer_qlora(KbitPrep::kNone));
  const ModelContext norms = prepared_context(trainer_qlora(KbitPrep::kNormsFp32));
  const ModelContext peft = prepared_context(trainer_qlora(KbitPrep::kPeft));
  const Unquantized elements = unquantized_elements(none.graph);
  REQUIRE(elements.norms > 0);
  REQUIRE(elements.all > 100 * elements.norms);  // the embeddings dominate
  const auto f32 = [](const ModelContext& c) {
    return model_size(c.graph, Precision::kBf16Pure).weight_bytes_by_dtype["f32"];
  };
  const auto bf16 = [](const ModelContext& c) {
    return model_size(c.graph, Precision::kBf16Pure).weight_bytes_by_dtype["bf16"];
  };
  // Each upcast weight moves from 2 bytes to 4.
  CHECK(f32(norms) - f32(none) == 4 * elements.norms);
  CHECK(bf16(none) - bf16(norms) == 2 * elements.norms);
  CHECK(f32(peft) - f32(none) == 4 * elements.all);
  CHECK(bf16(peft) == 0);
  // The packed NF4 weights and their constants are untouched.
  CHECK(model_size(peft.graph, Precision::kBf16Pure).weight_bytes_by_dtype["nf4"] ==
        model_size(none.graph, Precision::kBf16Pure).weight_bytes_by_dtype["nf4"]);
}

TEST_CASE("a module trained in full beside the adapters is a copy of the upcast module: fp32 states") {
  RunSettings settings = trainer_qlora(KbitPrep::kPeft);
  settings.train_patterns = {"*lm_head*"};  // PEFT modules_to_save
  const ModelContext context = prepared_context(settings);
  const graph::Node* head = find_node(context.graph, "lm_head");
  REQUIRE(head != nullptr);
  const graph::Param& weight = head->params.front();
  REQUIRE(weight.trainable);
  CHECK(stored_dtype(weight, Precision::kBf16Pure) == graph::DType::kF32);
  CHECK(grad_bytes(weight, Precision::kBf16Pure) == 4 * weight.elements());
  settings.kbit_prep = KbitPrep::kNone;
  const ModelContext loaded = prepared_context(settings);
  const graph::Node* as_loaded = find_node(loaded.graph, "lm_head");
  REQUIRE(as_loaded != nullptr);
  CHECK(grad_bytes(as_loaded->params.front(), Precision::kBf16Pure) == 2 * weight.elements());
}

TEST_CASE("an fp32 norm weight turns the residual fp32, and a 4-bit linear fed it returns fp32") {
  const ModelContext none = prepared_context(trainer_qlora(KbitPrep::kNone));
  const ModelContext norms = prepared_context(trainer_qlora(KbitPrep::kNormsFp32));
  const ModelContext peft = prepared_context(trainer_qlora(KbitPrep::kPeft));
  const std::string q = "model.layers.0.self_attn.q_proj";
  const std::string o = "model.layers.0.self_attn.o_proj";
  const graph::Node* q_node = find_node(none.graph, q);
  REQUIRE(q_node != nullptr);
  const int64_t weight = q_node->linear->in_features * q_node->linear->out_features;
  const int64_t result = 1024 * q_node->linear->out_features;
  // bitsandbytes 0.50.2's gemm_4bit fallback (H200, M = 1024) also holds two fp32 copies of the
  // absmax, one value per 64 weights: 8 bytes, 4 bf16 workspace elements (mechanisms/bnb_matmul4bit.cc).
  auto absmax = [](int64_t weights) { return weights / 64 * 4; };

  // As loaded: 16-bit throughout, one 16-bit dequantized weight a call, no casts.
  CHECK_FALSE(is_f32(none.graph, q));
  CHECK(q_node->workspace_elements.at(1, 1024) == weight + absmax(weight));
  CHECK(find_node(none.graph, q + ".cast:model.layers.0.input_layernorm") == nullptr);

  for (const ModelContext* prepared : {&norms, &peft}) {
    const graph::LayerGraph& g = prepared->graph;
    // LlamaRMSNorm returns weight * x.to(input_dtype): fp32 beside an fp32 weight.
    CHECK(is_f32(g, "model.layers.0.input_layernorm"));
    // Linear4bit runs on a 16-bit copy of its input and copies its result back to fp32.
    CHECK(is_f32(g, q));
    const graph::Node* node = find_node(g, q);
    REQUIRE(node != nullptr);
    CHECK(find_node(g, q + ".cast:model.layers.0.input_layernorm") != nullptr);
    // The forward holds the dequantized weight and the 16-bit result beside its copy;
    // the backward dequantizes as before.
    CHECK(node->workspace_elements.at(1, 1024) == weight + absmax(weight) + result);
    CHECK(node->backward_workspace().at(1, 1024) == weight);
    // o_proj reads the attention output, 16-bit under autocast: unchanged.
    CHECK_FALSE(is_f32(g, o));
    const graph::Node* o_node = find_node(g, o);
    REQUIRE(o_node != nullptr);
    const int64_t o_weight = o_node->linear->in_features * o_node->linear->out_features;
    CHECK(o_node->workspace_elements.at(1, 1024) == o_weight + absmax(o_weight));
  }
  // The embeddings: fp32 under PEFT's preparation, as loaded under TRL's.
  const std::string embed = "model.embed_tokens";
  CHECK(is_f32(peft.graph, embed));
  CHECK_FALSE(is_f32(norms.graph, embed));
  // PEFT's fp32 lm_head is cast to 16 bits at each call and kept for the input's gradient.
  const graph::Node* head = find_node(peft.graph, "lm_head");
  REQUIRE(head != nullptr);
  CHECK(saves(*head, "lm_head.weight_cast"));
  CHECK(find_node(norms.graph, "lm_head.weight_cast") == nullptr);
}

TEST_CASE("a norm that returns its input's dtype keeps the residual 16-bit under an fp32 weight") {
  // torchtune's and Gemma's RMSNorm return output.type_as(x); the config.json Llama's
  // Python RMSNorm built in that style (normalized_f32) stands in for them.
  // The Llama graph's norm is transformers' (weight * x.to(input_dtype)): its normalized
  // tensor is 16-bit before the weight, so an fp32 weight promotes (the case above).
  graph::LayerGraph graph = prepared_context(trainer_qlora(KbitPrep::kNone)).graph;
  CHECK_FALSE(find_tensor(graph, "model.layers.0.input_layernorm:normalized").dtype.has_value());
  // Built in the type_as style instead, the same upcast leaves the residual 16-bit.
  apply_kbit_prep(graph, KbitPrep::kNormsFp32);
  for (graph::Tensor& tensor : graph.tensors) {
    if (tensor.name.ends_with("_layernorm:normalized") || tensor.name == "model.norm:normalized") {
      tensor.dtype = graph::DType::kF32;
    }
  }
  apply_autocast(graph, AutocastWeights::kSixteenBitModel);
  CHECK_FALSE(is_f32(graph, "model.layers.0.input_layernorm"));
  CHECK_FALSE(is_f32(graph, "model.layers.0.self_attn.q_proj"));
}

TEST_CASE("the preparation raises the peak by at least the upcast weights and the fp32 layer inputs") {
  const Prediction none = predict_as_given(trainer_qlora(KbitPrep::kNone));
  const Prediction norms = predict_as_given(trainer_qlora(KbitPrep::kNormsFp32));
  const Prediction peft = predict_as_given(trainer_qlora(KbitPrep::kPeft));
  const Unquantized elements = unquantized_elements(prepared_context(trainer_qlora(KbitPrep::kNone)).graph);
  // The checkpointed layers' fp32 inputs (the residual after layer 0's first norm): 2 more bytes each.
  const int64_t hidden = 2048;
  const int64_t layers = 16;
  const int64_t checkpoint_inputs = (layers - 1) * 1024 * hidden * 2;
  CHECK(norms.peak_allocated - none.peak_allocated >= checkpoint_inputs);
  CHECK(peft.peak_allocated - none.peak_allocated >= 2 * elements.all + checkpoint_inputs);
  // And the run is slower: the fp32 copies of every 4-bit weight it dequantizes.
  CHECK(norms.time.step_ms > 1.05 * none.time.step_ms);
  // Under the open band the verdict prices PEFT's preparation.
  const Prediction open = predict_as_given(trainer_qlora(std::nullopt));
  CHECK(open.peak_allocated == peft.peak_allocated);
}

TEST_CASE("axolotl trains the unquantized weights as loaded, LLaMA-Factory upcasts the norms when told") {
  Result<ConfigImport> axolotl = import_axolotl_config(
      "adapter: qlora\nload_in_4bit: true\nbf16: true\nsequence_len: 1024\nmicro_batch_size: 1\n", "ax.yml",
      RunSettings{});
  REQUIRE_MESSAGE(axolotl.is_ok(), axolotl.message());
  CHECK(axolotl->settings.kbit_prep == KbitPrep::kNone);
  RunSettings open_prep = trainer_qlora(std::nullopt);
  open_prep.versions.erase("bitsandbytes");  // open in both, as in the axolotl config
  CHECK(resolve_stack(axolotl->settings).unknowns.size() < resolve_stack(open_prep).unknowns.size());

  const std::string base = "finetuning_type: lora\nquantization_bit: 4\nbf16: true\n";
  Result<ConfigImport> plain = import_llamafactory_config(base, "lf.yaml", RunSettings{});
  REQUIRE_MESSAGE(plain.is_ok(), plain.message());
  CHECK(plain->settings.kbit_prep == KbitPrep::kNone);
  Result<ConfigImport> upcast = import_llamafactory_config(base + "upcast_layernorm: true\n", "lf.yaml", RunSettings{});
  REQUIRE_MESSAGE(upcast.is_ok(), upcast.message());
  CHECK(upcast->settings.kbit_prep == KbitPrep::kNormsFp32);
  CHECK(validate_settings(upcast->settings, "lf.yaml").is_ok());
  Result<ConfigImport> bad = import_llamafactory_config(base + "upcast_layernorm: yes please\n", "lf.yaml", RunSettings{});
  CHECK(bad.message().find("lf.yaml: upcast_layernorm") != std::string::npos);
}

TEST_CASE("under AMP a 4-bit linear fed the fp32 residual returns fp32 as well") {
  RunSettings amp = trainer_qlora(std::nullopt);
  amp.precision = Precision::kBf16Amp;
  const ModelContext context = prepared_context(amp);
  const std::string gate = "model.layers.3.mlp.gate_proj";
  CHECK(is_f32(context.graph, gate));
  const graph::Node* node = find_node(context.graph, gate);
  REQUIRE(node != nullptr);
  CHECK(node->workspace_elements.at(1, 1024) > node->backward_workspace().at(1, 1024));
  // down_proj reads SiLU(gate) * up, both fp32 now: fp32 as well.
  CHECK(is_f32(context.graph, "model.layers.3.mlp.down_proj"));
}

}  // namespace headroom::planner
