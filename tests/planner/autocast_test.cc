// PyTorch AMP (precision bf16-amp / fp16-amp; planner/mechanisms/autocast.h): which tensors
// autocast leaves fp32, the 16-bit copies the matmuls keep, and the model states
// of an fp32 model. docs/memory-model.md, "Precision".
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "models/graph_builder.h"
#include "planner/mechanisms/autocast.h"
#include "planner/memory/model_states.h"
#include "planner/predict/planner.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
TEST_CASE("autocast: norms and the residual stay fp32, each matmul keeps its own 16-bit copies") {
  // x -> LayerNorm -> fc1 -> GELU -> fc2 -> + x
  models::GraphBuilder b;
  b.begin_block("block", "mlp", true);
  const graph::SizeExpr row = graph::SizeExpr::per_token(64);
  const std::string x = b.input("x", row, graph::DType::kF32, true);
  const std::string n = b.norm("ln", x, graph::SizeExpr::per_token(1), 64, models::NormKind::kLayerNorm, true, true);
  const std::string h = b.linear("fc1", n, graph::SizeExpr::per_token(1), 64, 256, true);
  const std::string a = b.activation("act", h, graph::SizeExpr::per_token(256), "gelu");
  const std::string o = b.linear("fc2", a, graph::SizeExpr::per_token(1), 256, 64, true);
  b.add("residual", x, o, row);
  graph::LayerGraph graph = b.finish();
  apply_autocast(graph);

  CHECK(graph.find_tensor("ln")->dtype == graph::DType::kF32);        // layer_norm is on the fp32 list
  CHECK_FALSE(graph.find_tensor("fc1")->dtype.has_value());            // a matmul returns 16-bit
  CHECK_FALSE(graph.find_tensor("act")->dtype.has_value());            // GELU runs in its input's dtype
  CHECK(graph.find_tensor("residual")->dtype == graph::DType::kF32);  // fp32 + bf16 promotes
  // fc1 reads and keeps a 16-bit copy of the fp32 norm output, not the norm output.
  const graph::Node& fc1 = *graph.find_node("fc1");
  CHECK(std::find(fc1.inputs.begin(), fc1.inputs.end(), "fc1.cast:ln") != fc1.inputs.end());
  CHECK(saves(fc1, "fc1.cast:ln"));
  CHECK_FALSE(saves(fc1, "ln"));
  CHECK_FALSE(graph.find_tensor("fc1.cast:ln")->dtype.has_value());
  // Both matmuls keep a 16-bit copy of their weight; fc2's input is already 16-bit.
  CHECK(saves(fc1, "fc1.weight_cast"));
  CHECK(graph.find_tensor("fc1.weight_cast")->elements == graph::SizeExpr::constant(64 * 256));
  const graph::Node& fc2 = *graph.find_node("fc2");
  CHECK(saves(fc2, "fc2.weight_cast"));
  CHECK(saves(fc2, "act"));
  CHECK(graph.find_node("fc2.cast:act") == nullptr);
  // Casts run right before their matmul.
  const auto position = [&](const std::string& name) {
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      if (graph.nodes[i].name == name) return static_cast<int>(i);
    }
    return -1;
  };
  CHECK(position("fc1.cast:ln") + 2 == position("fc1"));
  CHECK(position("fc1.weight_cast") + 1 == position("fc1"));
}

TEST_CASE("autocast: an RMSNorm after a 16-bit linear keeps its normalized tensor in 16 bits") {
  // Qwen3's q_norm: x (fp32) -> q_proj (16-bit out) -> RMSNorm over head_dim, whose
  // weight multiplies hidden_states.to(input_dtype); the residual's norm stays fp32.
  models::GraphBuilder b;
  b.begin_block("block", "attn", true);
  const std::string x = b.input("x", graph::SizeExpr::per_token(64), graph::DType::kF32, true);
  const std::string n = b.python_rms_norm("input_norm", x, graph::SizeExpr::per_token(1), 64, false);
  const std::string q = b.linear("q_proj", n, graph::SizeExpr::per_token(1), 64, 64, false);
  b.python_rms_norm("q_norm", q, graph::SizeExpr::per_token(4), 16, false);
  graph::LayerGraph graph = b.finish();
  apply_autocast(graph);
  CHECK_FALSE(graph.find_tensor("q_norm:normalized")->dtype.has_value());
  CHECK(graph.find_tensor("q_norm:x32")->dtype == graph::DType::kF32);
  CHECK(graph.find_tensor("q_norm")->dtype == graph::DType::kF32);  // the fp32 weight times it
  CHECK(graph.find_tensor("input_norm:normalized")->dtype == graph::DType::kF32);
}

// LlamaRMSNorm's hidden_states.to(torch.float32) over the fp32 residual of an AMP model
// returns the residual itself (transformers 5.23.0 models/llama/modeling_llama.py): the
// norm keeps x, and ":x32" is no tensor; over a 16-bit input the upcast is a real copy.
TEST_CASE("autocast: a Python RMSNorm over an fp32 input keeps the input, not an upcast copy") {
  models::GraphBuilder b;
  b.begin_block("block", "attn", true);
  const std::string x = b.input("x", graph::SizeExpr::per_token(64), graph::DType::kF32, true);
  const std::string n = b.python_rms_norm("input_norm", x, graph::SizeExpr::per_token(1), 64, false);
  const std::string q = b.linear("q_proj", n, graph::SizeExpr::per_token(1), 64, 64, false);
  b.python_rms_norm("q_norm", q, graph::SizeExpr::per_token(4), 16, false);
  graph::LayerGraph graph = b.finish();
  apply_autocast(graph);
  const graph::Node& input_norm = *graph.find_node("input_norm");
  CHECK(saves(input_norm, "x"));
  CHECK_FALSE(saves(input_norm, "input_norm:x32"));
  CHECK(graph.find_tensor("input_norm:x32")->elements.at(2, 8) == 0);
  const graph::Node& q_norm = *graph.find_node("q_norm");  // q_proj's output is 16-bit
  CHECK(saves(q_norm, "q_norm:x32"));
  CHECK(graph.find_tensor("q_norm:x32")->elements.at(2, 8) == 2 * 8 * 64);
}

TEST_CASE("AMP model states: fp32 weights and gradients, fp32 AdamW states, no master copy") {
  const graph::Param weight{"w", {1000, 1000}, graph::DType::kBF16, true, ""};
  CHECK(param_storage_bytes(weight, Precision::kBf16Amp) == 4'000'000);
  CHECK(grad_bytes(weight, Precision::kBf16Amp) == 4'000'000);
  CHECK(master_bytes_per_element(Precision::kBf16Amp) == 0);
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW, Precision::kFp16Amp, {1000, 1000}) == 8'000'000);
}

TEST_CASE("an AMP ViT keeps more activations than DeepSpeed-style mixed precision, fewer than fp32") {
  RunSettings s;
  s.model = "vit-b-16";
  s.gpu = "4090";
  s.micro_batch = 64;
  s.precision = Precision::kBf16Mixed;
  const Prediction mixed = predict_as_given(s);
  s.precision = Precision::kBf16Amp;
  const Prediction amp = predict_as_given(s);
  s.precision = Precision::kFp32;
  const Prediction fp32 = predict_as_given(s);
  CHECK(amp.peak.activations > mixed.peak.activations);
  CHECK(amp.peak.activations < fp32.peak.activations);
  CHECK(amp.peak.master_weights == 0);
}


TEST_CASE("Trainer(bf16=True) on a bf16 model: fp32 LoRA adapters are cast per linear and kept") {
  RunSettings s;
  s.model = "llama-3-8b";
  s.gpu = "a100-80g";
  s.mode = TrainMode::kLora;
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;  // PEFT's fp32 adapters, Accelerate's autocast around forward
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const graph::Node* q = context->graph.find_node("model.layers.0.self_attn.q_proj");
  REQUIRE(q != nullptr);
  // r = 16: lora_A [16, 4096] and lora_B [4096, 16], a 16-bit copy of each.
  const graph::Tensor* cast_a = context->graph.find_tensor("model.layers.0.self_attn.q_proj.adapter_cast_a");
  const graph::Tensor* cast_b = context->graph.find_tensor("model.layers.0.self_attn.q_proj.adapter_cast_b");
  REQUIRE(cast_a != nullptr);
  REQUIRE(cast_b != nullptr);
  CHECK(cast_a->elements == graph::SizeExpr::constant(16 * 4096));
  CHECK(cast_b->elements == graph::SizeExpr::constant(4096 * 16));
  // lora_A's copy serves dX only: layer 0's input does not require grad (the
  // embedding is frozen), so only lora_B's copy is kept there.
  const int q_index = static_cast<int>(q - context->graph.nodes.data());
  CHECK_FALSE(context->analysis.needs_input_grad[q_index]);
  const graph::Node* o = context->graph.find_node("model.layers.0.self_attn.o_proj");
  REQUIRE(o != nullptr);
  CHECK(context->analysis.needs_input_grad[static_cast<int>(o - context->graph.nodes.data())]);
  CHECK(saves(*q, "model.layers.0.self_attn.q_proj.adapter_cast_b"));
  // torchtune runs no autocast, and its adapters are bf16 anyway.
  s.stack = Stack::kTorchtune;
  Result<ModelContext> torchtune = prepare_context(s);
  REQUIRE(torchtune.is_ok());
  CHECK(torchtune->graph.find_tensor("model.layers.0.self_attn.q_proj.adapter_cast_b") == nullptr);
}

TEST_CASE("Trainer(bf16=True): without lora dropout each adapted linear keeps its own 16-bit copy of its input") {
  RunSettings s;
  s.model = "llama-3-8b";
  s.gpu = "a100-80g";
  s.mode = TrainMode::kLora;
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.lora.dropout = 0;
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const std::string q_name = "model.layers.0.self_attn.q_proj";
  const graph::Node* q = context->graph.find_node(q_name);
  const graph::Node* k = context->graph.find_node("model.layers.0.self_attn.k_proj");
  REQUIRE(q != nullptr);
  REQUIRE(k != nullptr);
  // PEFT's x.to(fp32) and autocast's cast back: one [tokens, 4096] tensor per
  // linear, kept for lora_A's gradient in place of the shared normed input.
  const graph::Tensor* copy = context->graph.find_tensor(q_name + ".adapter_input_cast");
  REQUIRE(copy != nullptr);
  CHECK(copy->elements == graph::SizeExpr::per_token(4096));
  CHECK(saves(*q, q_name + ".adapter_input_cast"));
  CHECK(saves(*k, "model.layers.0.self_attn.k_proj.adapter_input_cast"));
  CHECK_FALSE(saves(*q, q->inputs.front()));  // the frozen base keeps nothing of x
  // With dropout, the dropout output is that per-layer tensor already.
  s.lora.dropout = 0.05;
  Result<ModelContext> dropout = prepare_context(s);
  REQUIRE(dropout.is_ok());
  CHECK(dropout->graph.find_tensor(q_name + ".adapter_input_cast") == nullptr);
  // Adapters in the model's dtype (torchtune, litgpt) are not cast at all.
  s.lora.dropout = 0;
  s.adapter_dtype = AdapterDtype::kModel;
  Result<ModelContext> model_dtype = prepare_context(s);
  REQUIRE(model_dtype.is_ok());
  CHECK(model_dtype->graph.find_tensor(q_name + ".adapter_input_cast") == nullptr);
}

TEST_CASE("autocast: llm-foundry's LPLayerNorm keeps a 16-bit input and returns 16 bits") {
  models::GraphBuilder b;
  b.begin_block("block", "mlp", true);
  const std::string x = b.input("x", graph::SizeExpr::per_token(64), graph::DType::kF32, true);
  b.norm("ln", x, graph::SizeExpr::per_token(1), 64, models::NormKind::kLayerNorm, true, true);
  b.mutable_graph().nodes.back().op = "low_precision_norm";
  graph::LayerGraph graph = b.finish();
  apply_autocast(graph);
  CHECK_FALSE(graph.find_tensor("ln")->dtype.has_value());  // 16-bit, where nn.LayerNorm gives fp32
  const graph::Node& ln = *graph.find_node("ln");
  CHECK(saves(ln, "ln.cast:x"));
  CHECK_FALSE(saves(ln, "x"));
  CHECK(saves(ln, "ln.weight_cast"));  // the downcast weight layer_norm's backward reads
  CHECK(graph.find_tensor("ln:rstd")->dtype == graph::DType::kF32);
}

// autocast_mode.cpp cached_cast: a 16-bit cast of a trainable fp32 leaf is cached to
// the end of the autocast region (the model's forward); a frozen weight's is not.
// A checkpointed block saves none of them, so the walk and the simulator hold them
// through the rest of the forward (the meta-device oracle: Llama-3.2-1B in full under
// AMP with checkpointing peaks at the forward's end, 21.6 GiB, with every cast live).
TEST_CASE("autocast caches the casts of trainable weights to the forward's end, not of frozen ones") {
  RunSettings settings;
  settings.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b";
  settings.precision = Precision::kBf16Amp;
  settings.stack = Stack::kHfTrainer;
  settings.optimizer_impl = OptimizerImpl::kFused;
  settings.micro_batch = 2;
  settings.seq_len = 2048;
  settings.checkpointing = CheckpointPolicy::kEveryBlock;
  Result<ModelContext> full = prepare_context(settings);
  REQUIRE_MESSAGE(full.is_ok(), full.message());
  const std::vector<bool> cached = autocast_cached_casts(full->graph);
  const auto is_cached = [&](const graph::LayerGraph& g, const std::vector<bool>& flags, const std::string& name) {
    for (size_t t = 0; t < g.tensors.size(); ++t) {
      if (g.tensors[t].name == name) return static_cast<bool>(flags[t]);
    }
    return false;
  };
  CHECK(is_cached(full->graph, cached, "model.layers.0.mlp.gate_proj.weight_cast"));
  const StepProfile profile = profile_step(full->graph, full->analysis, full->compute_dtype, 2, 2048,
                                           Accounting::kAllocated, full->gpu);
  // every matmul weight of a layer, in bf16: q, k, v, o and the three MLP projections
  const int64_t layer_weights = 2048 * 2048 * 2 + 512 * 2048 * 2 + 3 * 8192 * 2048;
  CHECK(profile.blocks[1].cast_cache == layer_weights * 2);
  const Prediction prediction = predict_as_given(settings);
  CHECK(prediction.where.phase == "forward");  // the loss, with every layer's cast still cached
  CHECK(prediction.simulated_peak_allocated ==
        doctest::Approx(static_cast<double>(prediction.peak_allocated)).epsilon(0.01));

  settings.mode = TrainMode::kLora;  // the base weights are frozen: cast at each call, not cached
  settings.lora.targets = {"q_proj", "v_proj"};
  Result<ModelContext> lora = prepare_context(settings);
  REQUIRE_MESSAGE(lora.is_ok(), lora.message());
  CHECK_FALSE(is_cached(lora->graph, autocast_cached_casts(lora->graph), "model.layers.0.mlp.gate_proj.weight_cast"));
}

}  // namespace headroom::planner

