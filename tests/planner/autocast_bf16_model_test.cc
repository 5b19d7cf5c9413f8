// Autocast over a 16-bit model (precision bf16 with StackSpec::autocast;
// planner/mechanisms/autocast.h, AutocastWeights::kSixteenBitModel): transformers' Trainer,
// Accelerate and the diffusers scripts wrap the forward of a bf16 model in
// torch.autocast, and ops on autocast's fp32 list (layer_norm; softmax given no
// dtype) then run on fp32 copies and return fp32. Read from
// aten/src/ATen/autocast_mode.h (AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE),
// accelerate/accelerator.py (native_amp, prepare_model) and derivatives.yaml
// (native_layer_norm keeps input, weight and bias). docs/stacks.md,
// "Autocast over a bf16 model".
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "graph/graph_analysis.h"
#include "models/graph_builder.h"
#include "planner/mechanisms/autocast.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"
#include "planner/time/block_profile.h"
#include "planner/settings/hardware.h"
#include "planner/predict/model_context.h"
#include "planner/settings/run_settings.h"
#include "planner/settings/stack.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

bool reads(const graph::Node& node, const std::string& tensor) {
  return std::find(node.inputs.begin(), node.inputs.end(), tensor) != node.inputs.end();
}

bool is_f32(const graph::LayerGraph& graph, const std::string& tensor) {
  const graph::Tensor* found = graph.find_tensor(tensor);
  REQUIRE_MESSAGE(found != nullptr, tensor);
  return found->dtype == graph::DType::kF32;
}

// x (16-bit, requires grad) -> LayerNorm -> q, k (two linears) ; x + q.
graph::LayerGraph layer_norm_block() {
  models::GraphBuilder b;
  b.begin_block("block", "attention", true);
  const graph::SizeExpr row = graph::SizeExpr::per_token(64);
  const std::string x = b.input("x", row, std::nullopt, true);
  const std::string n = b.norm("ln", x, graph::SizeExpr::per_token(1), 64, models::NormKind::kLayerNorm, true, true);
  const std::string q = b.linear("q", n, graph::SizeExpr::per_token(1), 64, 64, false);
  b.linear("k", n, graph::SizeExpr::per_token(1), 64, 64, false);
  b.add("residual", x, q, row);
  return b.finish();
}

// Eager attention over 16-bit q, k, v (one head of 64, scores B*S*S), its softmax
// given dtype=float32 and cast back (HF's) or given no dtype.
graph::LayerGraph eager_attention_block(bool softmax_fp32) {
  models::GraphBuilder b;
  b.begin_block("block", "attention", true);
  const graph::SizeExpr row = graph::SizeExpr::per_token(64);
  const std::string q = b.input("q", row, std::nullopt, true);
  const std::string k = b.input("k", row, std::nullopt, true);
  const std::string v = b.input("v", row, std::nullopt, true);
  models::AttentionShape shape;
  shape.heads = 1;
  shape.head_dim = 64;
  shape.query_rows = graph::SizeExpr::per_token(1);
  shape.scores_per_head = graph::SizeExpr{0, 0, 0, 0, 0, 1};  // B*S*S
  b.eager_attention("attn", q, k, v, shape, models::EagerAttentionOptions{softmax_fp32, 0.0});
  return b.finish();
}

// A ViT-B/16 run in pure bf16 under transformers' Trainer, B = 16, no checkpointing.
RunSettings trainer_vit(bool autocast) {
  RunSettings s;
  s.model = "vit-b-16";
  s.gpu = "a100-80g";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.micro_batch = 16;
  s.autocast = autocast;
  return s;
}

}  // namespace

TEST_CASE("autocast over a bf16 model: LayerNorm runs on fp32 copies and returns fp32, each linear casts it back") {
  graph::LayerGraph graph = layer_norm_block();
  apply_autocast(graph, AutocastWeights::kSixteenBitModel);

  const graph::Node& ln = *graph.find_node("ln");
  // The fp32 copy of x is what layer_norm reads and keeps; x itself is not kept.
  REQUIRE(graph.find_node("ln.cast:x") != nullptr);
  CHECK(is_f32(graph, "ln.cast:x"));
  CHECK(graph.find_tensor("ln.cast:x")->elements == graph::SizeExpr::per_token(64));
  CHECK(reads(ln, "ln.cast:x"));
  CHECK(saves(ln, "ln.cast:x"));
  CHECK_FALSE(saves(ln, "x"));
  // Its bf16 weight and bias are copied to fp32 and kept too (native_layer_norm's backward reads both).
  REQUIRE(graph.find_tensor("ln.affine_cast") != nullptr);
  CHECK(is_f32(graph, "ln.affine_cast"));
  CHECK(graph.find_tensor("ln.affine_cast")->elements == graph::SizeExpr::constant(2 * 64));
  CHECK(saves(ln, "ln.affine_cast"));
  // fp32 out; each linear makes and keeps its own 16-bit copy (autocast caches no activation).
  CHECK(is_f32(graph, "ln"));
  for (const std::string linear : {"q", "k"}) {
    const graph::Node& node = *graph.find_node(linear);
    const std::string copy = linear + ".cast:ln";
    REQUIRE(graph.find_tensor(copy) != nullptr);
    CHECK_FALSE(graph.find_tensor(copy)->dtype.has_value());
    CHECK(reads(node, copy));
    CHECK(saves(node, copy));
    CHECK_FALSE(saves(node, "ln"));
    // The bf16 weights are used as they are.
    CHECK(graph.find_node(linear + ".weight_cast") == nullptr);
    CHECK_FALSE(is_f32(graph, linear));
  }
  // The linears return 16 bits, so the residual stays 16-bit.
  CHECK_FALSE(is_f32(graph, "residual"));
}

TEST_CASE("autocast: a LayerNorm fed fp32 needs no copy, an upcast weight no affine copy") {
  graph::LayerGraph graph = layer_norm_block();
  for (graph::Node& node : graph.nodes) {
    for (graph::Param& param : node.params) {
      if (node.name == "ln") param.upcast_fp32 = true;  // a script's norms-fp32
    }
  }
  apply_autocast(graph, AutocastWeights::kSixteenBitModel);
  CHECK(graph.find_node("ln.affine_cast") == nullptr);
  CHECK(graph.find_node("ln.cast:x") != nullptr);  // x is still 16-bit

  // AMP over an fp32 model: the residual feeding the norm is fp32 already.
  models::GraphBuilder b;
  b.begin_block("block", "mlp", true);
  const std::string x = b.input("x", graph::SizeExpr::per_token(64), graph::DType::kF32, true);
  b.norm("ln", x, graph::SizeExpr::per_token(1), 64, models::NormKind::kLayerNorm, true, true);
  graph::LayerGraph amp = b.finish();
  apply_autocast(amp);
  CHECK(amp.find_node("ln.cast:x") == nullptr);
  CHECK(amp.find_node("ln.affine_cast") == nullptr);
  CHECK(saves(*amp.find_node("ln"), "x"));
}

TEST_CASE("autocast: softmax given no dtype returns fp32, the explicit cast back stays 16-bit") {
  for (const bool softmax_fp32 : {false, true}) {
    for (const AutocastWeights weights : {AutocastWeights::kSixteenBitModel, AutocastWeights::kFp32Model}) {
      CAPTURE(softmax_fp32);
      graph::LayerGraph graph = eager_attention_block(softmax_fp32);
      apply_autocast(graph, weights);

      const graph::Node& softmax = *graph.find_node("attn.softmax");
      CHECK(is_f32(graph, "attn.softmax"));
      // softmax(dtype=float) converts its 16-bit input first (SoftMax.cpp: input_.toType(dtype)),
      // a copy it reads and does not keep (its backward uses the output).
      const std::string upcast = "attn.softmax.cast:attn.scores";
      REQUIRE(graph.find_node(upcast) != nullptr);
      CHECK(is_f32(graph, upcast));
      CHECK(reads(softmax, upcast));
      CHECK_FALSE(saves(softmax, upcast));
      const graph::Node& pv = *graph.find_node("attn.pv");
      if (softmax_fp32) {
        // HF's softmax(dtype=float32).to(query.dtype): the probabilities are 16-bit again.
        CHECK_FALSE(is_f32(graph, "attn.softmax_cast"));
        CHECK(saves(pv, "attn.softmax_cast"));
      } else {
        // The matmul keeps a 16-bit copy of the fp32 probabilities.
        CHECK(saves(pv, "attn.pv.cast:attn.softmax"));
        CHECK_FALSE(saves(pv, "attn.softmax"));
      }
      CHECK_FALSE(is_f32(graph, "attn.pv"));
    }
  }
  // fp16 AMP: CUDA's softmax reads half and writes float itself (SoftMax.cpp,
  // half_to_float), with no fp32 copy of the scores; its output is fp32 as with bf16.
  graph::LayerGraph fp16 = eager_attention_block(false);
  apply_autocast(fp16, AutocastWeights::kFp32Model, graph::DType::kF16);
  CHECK(fp16.find_node("attn.softmax.cast:attn.scores") == nullptr);
  CHECK(is_f32(fp16, "attn.softmax"));
}

TEST_CASE("autocast: pow runs on an fp32 copy of its input, keeps it, and what follows is fp32") {
  // GPT-2's gelu_new cubes x with pow, which is on autocast's fp32 list.
  models::GraphBuilder b;
  b.begin_block("block", "mlp", true);
  const graph::SizeExpr elements = graph::SizeExpr::per_token(256);
  const std::string x = b.input("x", elements, std::nullopt, true);
  models::OpSpec cube;
  cube.name = "cube";
  cube.op = "pow";
  cube.inputs = {x};
  cube.out_elements = elements;
  cube.saves = {graph::SavedRef{x, graph::SaveWhen::kInputGrad}};
  const std::string x3 = b.op(cube);
  b.add("inner", x, x3, elements);
  graph::LayerGraph graph = b.finish();
  apply_autocast(graph, AutocastWeights::kSixteenBitModel);
  CHECK(is_f32(graph, "cube"));
  CHECK(is_f32(graph, "cube.cast:x"));
  CHECK(saves(*graph.find_node("cube"), "cube.cast:x"));
  CHECK_FALSE(saves(*graph.find_node("cube"), "x"));
  CHECK(is_f32(graph, "inner"));  // bf16 + fp32
}

// diffusers' Upsample2D under the SDXL script's autocast: upsample_nearest2d is on the
// fp32 list, so it reads an fp32 copy of its 16-bit input (kept by nothing: its backward
// needs only sizes) and returns fp32, which the next conv casts back to 16 bits and keeps.
TEST_CASE("autocast: nearest upsampling runs on an fp32 copy and returns fp32, the conv keeps its 16-bit cast") {
  models::GraphBuilder b;
  b.begin_block("up", "unet_sample", false);
  const std::string x = b.input("x", graph::SizeExpr::per_token(64), std::nullopt, true);
  const std::string up = b.copy("interpolate", "upsample_nearest2d", {x}, graph::SizeExpr::per_token(256));
  models::OpSpec conv;
  conv.name = "conv";
  conv.op = "conv2d";
  conv.inputs = {up};
  conv.out_elements = graph::SizeExpr::per_token(256);
  conv.saves = {graph::SavedRef{up, graph::SaveWhen::kAnyGrad}};
  conv.params = {b.param("conv.weight", {64, 64, 3, 3})};
  b.op(conv);
  graph::LayerGraph graph = b.finish();
  apply_autocast(graph, AutocastWeights::kSixteenBitModel);
  CHECK(is_f32(graph, "interpolate.cast:x"));
  CHECK(reads(*graph.find_node("interpolate"), "interpolate.cast:x"));
  CHECK(is_f32(graph, "interpolate"));
  REQUIRE(graph.find_tensor("conv.cast:interpolate") != nullptr);
  CHECK_FALSE(graph.find_tensor("conv.cast:interpolate")->dtype.has_value());
  CHECK(saves(*graph.find_node("conv"), "conv.cast:interpolate"));
  CHECK_FALSE(saves(*graph.find_node("conv"), "interpolate"));
}

TEST_CASE("Trainer QLoRA: PEFT's bitsandbytes layers skip their input cast under autocast, the 4-bit linears share x") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "a100-80g";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.seq_len = 1024;
  s.lora.dropout = 0.0;
  s.kbit_prep = KbitPrep::kNone;
  for (const TrainMode mode : {TrainMode::kQlora, TrainMode::kLora}) {
    s.mode = mode;
    if (mode == TrainMode::kLora) s.kbit_prep.reset();
    const ModelContext context = prepared_context(s);
    const std::string q = "model.layers.1.self_attn.q_proj";
    const graph::Node* node = context.graph.find_node(q);
    REQUIRE(node != nullptr);
    const bool copied = context.graph.find_node(q + ".adapter_input_cast") != nullptr;
    // peft/tuners/lora/bnb.py: requires_conversion = not torch.is_autocast_enabled().
    CHECK(copied == (mode == TrainMode::kLora));
    CHECK(saves(*node, copied ? q + ".adapter_input_cast" : node->inputs.front()));
  }
}

TEST_CASE("fp32 adapters without autocast: PEFT's fp32 copy of the input and the fp32 x·A are kept") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "a100-80g";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kTorchAmp;  // a plain loop over model.bfloat16() with PEFT: fp32 adapters, no autocast
  s.mode = TrainMode::kLora;
  s.seq_len = 1024;
  s.lora.dropout = 0.0;
  const ResolvedStack stack = resolve_stack(s);
  REQUIRE_FALSE(stack.top.autocast);
  REQUIRE(stack.top.adapter_dtype == AdapterDtype::kFp32);
  const ModelContext context = prepared_context(s);
  const std::string q = "model.layers.1.self_attn.q_proj";
  const graph::Node* node = context.graph.find_node(q);
  REQUIRE(node != nullptr);
  CHECK(is_f32(context.graph, q + ".adapter_input_cast"));
  CHECK(saves(*node, q + ".adapter_input_cast"));
  CHECK(is_f32(context.graph, q + ".lora_mid"));
  CHECK_FALSE(is_f32(context.graph, q));  // the result is cast back
  CHECK(context.graph.find_node(q + ".adapter_cast_a") == nullptr);

  // The same under ZeRO-3 through DeepSpeed, which keeps PEFT's fp32 parameters of a
  // ZeRO-Init model since 0.19.2; at ZeRO-1/2 the engine casts them to bf16.
  s.stack = Stack::kHfTrainer;
  s.zero_stage = 3;
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kFp32);
  CHECK_FALSE(resolve_stack(s).top.autocast);
  s.zero_stage = 2;
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kModel);
}

TEST_CASE("fp32 adapters under FSDP's mixed precision are gathered in bf16: no fp32 copy of the input") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Mixed;  // fp32 shards, MixedPrecisionPolicy(param_dtype=bf16)
  s.stack = Stack::kUnspecified;
  s.autocast = false;
  s.adapter_dtype = AdapterDtype::kFp32;
  s.mode = TrainMode::kLora;
  s.seq_len = 1024;
  s.gpus_per_node = 2;
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp2;
  s.lora.dropout = 0.0;
  const std::string q = "model.layers.1.self_attn.q_proj";
  const ModelContext sharded = prepared_context(s);
  CHECK(sharded.graph.find_node(q + ".adapter_input_cast") == nullptr);
  CHECK_FALSE(is_f32(sharded.graph, q + ".lora_mid"));
  // Pure bf16 under FSDP2 has no param_dtype: the fp32 adapters compute in fp32.
  s.precision = Precision::kBf16Pure;
  const ModelContext pure = prepared_context(s);
  CHECK(is_f32(pure.graph, q + ".adapter_input_cast"));
  CHECK(is_f32(pure.graph, q + ".lora_mid"));
}

TEST_CASE("which stacks run the forward under autocast over the bf16 weights") {
  RunSettings s;
  s.precision = Precision::kBf16Pure;
  const auto resolved = [&](Stack stack) {
    s.stack = stack;
    return resolve_stack(s);
  };
  // Accelerate's native_amp: the Trainer and the diffusers scripts, not under DeepSpeed.
  CHECK(resolved(Stack::kHfTrainer).top.autocast);
  CHECK(resolved(Stack::kHfTrainer).bottom.autocast);
  s.zero_stage = 2;
  CHECK_FALSE(resolved(Stack::kHfTrainer).top.autocast);
  // DeepSpeed's engine runs the module in its own 16 bits whoever drives it, and
  // casts PEFT's fp32 adapters back with it (module.bfloat16()).
  CHECK_FALSE(resolved(Stack::kUnspecified).top.autocast);
  s.mode = TrainMode::kLora;
  CHECK(resolved(Stack::kHfTrainer).top.adapter_dtype == AdapterDtype::kModel);
  CHECK(resolved(Stack::kUnspecified).top.adapter_dtype == AdapterDtype::kModel);
  CHECK(resolved(Stack::kUnspecified).unknowns.empty() == false);  // the optimizer, the loss
  for (const std::string& unknown : resolved(Stack::kUnspecified).unknowns) {
    CHECK(unknown.find("adapter") == std::string::npos);
    CHECK(unknown.find("--autocast") == std::string::npos);
  }
  s.mode = TrainMode::kFull;
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp1;  // Accelerate's FSDP keeps native_amp
  CHECK(resolved(Stack::kHfTrainer).top.autocast);
  s.zero_stage = 0;
  s.sharding.reset();
  CHECK(resolved(Stack::kComposer).top.autocast);
  for (const Stack stack : {Stack::kTorchtune, Stack::kLitgpt, Stack::kTorchtitan, Stack::kDeepspeed,
                            Stack::kTorchAmp}) {
    CAPTURE(stack_name(stack));
    CHECK_FALSE(resolved(stack).top.autocast);
    CHECK_FALSE(resolved(stack).bottom.autocast);
  }
  // Unspecified: a band, autocast at its top, with the reason named.
  const ResolvedStack open = resolved(Stack::kUnspecified);
  CHECK(open.top.autocast);
  CHECK_FALSE(open.bottom.autocast);
  CHECK(std::any_of(open.unknowns.begin(), open.unknowns.end(),
                    [](const std::string& u) { return u.find("--autocast") != std::string::npos; }));
  const std::optional<RunSettings> bottom = bottom_of_band(s);
  REQUIRE(bottom.has_value());
  CHECK(bottom->autocast == false);
  // FSDP's mixed precision computes on 16-bit unsharded parameters under the same
  // autocast (Accelerate keeps native_amp for FSDP); DeepSpeed-style mixed precision does not.
  s.precision = Precision::kBf16Mixed;
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp1;
  CHECK(autocast_matters(s));
  CHECK(resolved(Stack::kHfTrainer).top.autocast);
  s.sharding = Sharding::kDeepspeed;
  CHECK_FALSE(autocast_matters(s));
  s.zero_stage = 0;
  s.sharding.reset();
  // Under DeepSpeed-style mixed precision it cannot matter, so it is not an unknown.
  s.precision = Precision::kBf16Mixed;
  const ResolvedStack mixed = resolved(Stack::kUnspecified);
  CHECK(std::none_of(mixed.unknowns.begin(), mixed.unknowns.end(),
                     [](const std::string& u) { return u.find("--autocast") != std::string::npos; }));
  // An override pins it.
  s.precision = Precision::kBf16Pure;
  s.autocast = false;
  CHECK_FALSE(resolved(Stack::kHfTrainer).top.autocast);
  s.autocast = true;
  CHECK(resolved(Stack::kTorchtune).top.autocast);
}

TEST_CASE("autocast: only with precision bf16 or FSDP's mixed precision, never off under a QLoRA preparation, and carried in JSON") {
  RunSettings s;
  s.model = "tiny-llama";
  s.gpu = "4090";
  s.precision = Precision::kBf16Mixed;
  s.autocast = true;
  Status refused = validate_settings(s, "run.json");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("autocast") != std::string::npos);
  CHECK(refused.message().find("bf16-mixed") != std::string::npos);

  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kQlora;
  s.stack = Stack::kHfTrainer;
  s.autocast = false;
  CHECK_FALSE(kbit_prep_matters(s));
  s.kbit_prep = KbitPrep::kPeft;
  refused = validate_settings(s, "run.json");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("kbit_prep") != std::string::npos);
  CHECK(refused.message().find("autocast off") != std::string::npos);
  s.kbit_prep = KbitPrep::kNone;
  CHECK(validate_settings(s, "run.json").is_ok());

  const nlohmann::json j = settings_to_json(s);
  CHECK(j.at("autocast") == false);
  Result<RunSettings> back = settings_from_json(j, "run.json");
  REQUIRE(back.is_ok());
  CHECK(back->autocast == false);
  nlohmann::json bad = j;
  bad["autocast"] = "on";
  CHECK(settings_from_json(bad, "run.json").message().find("autocast") != std::string::npos);
}

TEST_CASE("a ViT under the Trainer's FSDP mixed precision keeps the LayerNorms' fp32 copies too") {
  RunSettings s = trainer_vit(true);
  s.precision = Precision::kBf16Mixed;
  s.zero_stage = 3;
  s.sharding = Sharding::kFsdp1;
  s.gpus_per_node = 2;
  const Prediction on = predict_as_given(s);
  s.autocast = false;
  const Prediction off = predict_as_given(s);
  CHECK(on.peak_allocated > off.peak_allocated);
}

TEST_CASE("a ViT under the Trainer's autocast keeps each LayerNorm's fp32 input copy, an RMSNorm Llama nothing more") {
  const Prediction on = predict_as_given(trainer_vit(true));
  const Prediction off = predict_as_given(trainer_vit(false));
  // Without checkpointing every LayerNorm keeps its fp32 copy of x where it kept the
  // bf16 x: at least 2 more bytes an element of every LayerNorm input.
  const ModelContext context = prepared_context(trainer_vit(false));
  int64_t norm_inputs = 0;
  for (const graph::Node& node : context.graph.nodes) {
    if (node.op != "norm") continue;
    REQUIRE(std::find(node.outputs.begin(), node.outputs.end(), node.name + ":mean") != node.outputs.end());
    norm_inputs += context.graph.find_tensor(node.inputs.front())->elements.at(16, context.seq_len);
  }
  REQUIRE(norm_inputs > 0);
  CHECK(on.peak_allocated - off.peak_allocated >= 2 * norm_inputs);
  CHECK(on.time.step_ms > off.time.step_ms);

  // Llama 3.2 1B: Python RMSNorms (they upcast and cast back themselves) and SDPA,
  // full fine-tuning: nothing autocast runs in fp32 there, so nothing changes.
  RunSettings llama = torchtune_llama_1b();
  llama.stack = Stack::kHfTrainer;
  llama.autocast = true;
  const Prediction llama_on = predict_as_given(llama);
  llama.autocast = false;
  const Prediction llama_off = predict_as_given(llama);
  CHECK(llama_on.peak_allocated == llama_off.peak_allocated);
}

TEST_CASE("a dtype cast's backward is one copy of the gradient, as its forward") {
  models::GraphBuilder b;
  b.begin_block("block", "mlp", true);
  const std::string x = b.input("x", graph::SizeExpr::per_token(4096), std::nullopt, true);
  b.norm("ln", x, graph::SizeExpr::per_token(1), 4096, models::NormKind::kLayerNorm, false, false);
  graph::LayerGraph graph = b.finish();
  apply_autocast(graph, AutocastWeights::kSixteenBitModel);
  const graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  int cast = -1;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].name == "ln.cast:x") cast = static_cast<int>(n);
  }
  REQUIRE(cast >= 0);
  REQUIRE(analysis.needs_input_grad[cast]);
  const Result<GpuSpec> gpu = find_gpu("a100-80g");
  REQUIRE(gpu.is_ok());
  const NodeTimes times = node_times(graph, analysis, cast, graph::DType::kBF16, 64, 4096, gpu.value(), {});
  // ToCopyBackward converts the gradient back once: the forward's bytes (6.4 GB
  // here, milliseconds against microseconds of launches), not twice them.
  REQUIRE(times.fwd_ms > 1.0);
  CHECK(times.bwd_ms == doctest::Approx(times.fwd_ms).epsilon(0.01));
}

}  // namespace headroom::planner
