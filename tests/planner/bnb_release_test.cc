// What the bitsandbytes release changes in QLoRA's 4-bit linears (planner/settings/bnb_release.h,
// planner/mechanisms/bnb_matmul4bit.h): up to 0.43.1 MatMul4Bit keeps its input for backward
// (autograd/_functions.py, ctx.tensors = (A, B)); up to 0.46.1 a Linear4bit fed fp32 computes in
// fp32 (nn/modules.py set_compute_type) and copies its dequantized weight to fp32. Measured on the
// meta-device oracle (envs hf4bnb43, hf4bnb45); docs/stacks.md, "bitsandbytes releases".
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "planner/configs/pip_freeze.h"
#include "planner/settings/bnb_release.h"
#include "planner/settings/stack.h"
#include "planner/settings/versions.h"
#include "tests/planner/predict_as_given.h"
#include "tests/support/temp_dir.h"

namespace headroom::planner {
namespace {

// Llama 3.2 1B (16 layers, H = 2048, MLP 8192) with QLoRA on q and v under the Trainer's
// autocast over a bf16 model, B = 1, S = 1024, no checkpointing: the peak falls in the
// head's backward, with every layer's saved tensors held.
RunSettings trainer_qlora(const std::string& bitsandbytes, KbitPrep prep = KbitPrep::kNone) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kQlora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 1;
  s.seq_len = 1024;
  s.kbit_prep = prep;
  s.loss = LossSpec{LossImpl::kFull, 8};
  // Every other release pinned, so that the bitsandbytes release is all the band leaves open.
  REQUIRE(parse_versions("transformers=5.23.0,torch=2.11.0,peft=0.21.2", "test", s.versions).is_ok());
  if (!bitsandbytes.empty()) {
    REQUIRE(parse_versions("bitsandbytes=" + bitsandbytes, "test", s.versions).is_ok());
  }
  return s;
}

// Whether `node` keeps `tensor` whenever its input requires grad, as MatMul4Bit's ctx.tensors does.
bool keeps_input(const graph::Node& node, const std::string& tensor) {
  return std::any_of(node.saves.begin(), node.saves.end(), [&](const graph::SavedRef& ref) {
    return ref.tensor == tensor && ref.when == graph::SaveWhen::kInputGrad;
  });
}

const graph::Node& node_named(const graph::LayerGraph& graph, const std::string& name) {
  for (const graph::Node& node : graph.nodes) {
    if (node.name == name) return node;
  }
  FAIL("no node " << name);
  return graph.nodes.front();
}

bool says_bitsandbytes(const RunSettings& s) {
  const Result<FitAnswer> answer = fit(s);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  for (const std::string& unknown : answer->as_given.prediction.band_unknowns) {
    if (unknown.find("bitsandbytes release") != std::string::npos) return true;
  }
  return false;
}

constexpr int64_t kTokens = 1024;
constexpr int64_t kLayers = 16;
constexpr int64_t kHidden = 2048;
constexpr int64_t kMlp = 8192;

}  // namespace

TEST_CASE("bitsandbytes up to 0.43.1: every 4-bit linear keeps its input until backward") {
  const int64_t held = predict_as_given(trainer_qlora("0.43.1")).peak.activations;
  const int64_t freed = predict_as_given(trainer_qlora("0.43.2")).peak.activations;
  // Newly kept a layer: the two norms' outputs (q/k/v's and gate/up's input) and down_proj's
  // input (act(gate) * up), 16-bit; o_proj's input is the attention output SDPA keeps anyway.
  // Layer 0's first norm reads the frozen embeddings: nothing there requires grad.
  const int64_t per_layer = kTokens * (2 * kHidden + kMlp) * 2;
  CHECK(held - freed == kLayers * per_layer - kTokens * kHidden * 2);
  const ModelContext context = prepared_context(trainer_qlora("0.43.1"));
  const graph::Node& down = node_named(context.graph, "model.layers.3.mlp.down_proj");
  CHECK(keeps_input(down, down.inputs.front()));
  const ModelContext current = prepared_context(trainer_qlora("0.50.2"));
  CHECK_FALSE(keeps_input(node_named(current.graph, "model.layers.3.mlp.down_proj"), down.inputs.front()));
}

TEST_CASE("0.43.1 under checkpointing: every layer's 4-bit linears keep their inputs, which no hook drops") {
  RunSettings held = trainer_qlora("0.43.1");
  RunSettings freed = trainer_qlora("0.43.2");
  held.checkpointing = freed.checkpointing = CheckpointPolicy::kEveryBlock;
  // ctx.tensors is no saved tensor: non-reentrant checkpointing's saved_tensors_hooks never see
  // it. Each layer keeps both norms' outputs, the attention output (o_proj's input, which SDPA's
  // saves no longer hold) and down_proj's input; transformers 5 makes the embeddings' output
  // require grad under checkpointing, so layer 0's first norm counts too.
  const int64_t per_layer = kTokens * (3 * kHidden + kMlp) * 2;
  CHECK(predict_as_given(held).peak.activations - predict_as_given(freed).peak.activations == kLayers * per_layer);
}

TEST_CASE("fed fp32 (PEFT's preparation), 0.43.1 keeps the fp32 input itself, not a 16-bit copy") {
  const int64_t held = predict_as_given(trainer_qlora("0.43.1", KbitPrep::kPeft)).peak.activations;
  const int64_t freed = predict_as_given(trainer_qlora("0.43.2", KbitPrep::kPeft)).peak.activations;
  // The norms' outputs are fp32 beside fp32 weights, and gate/up return fp32 (out.to(inp_dtype)).
  const int64_t per_layer = kTokens * (2 * kHidden + kMlp) * 4;
  CHECK(held - freed == kLayers * per_layer - kTokens * kHidden * 4);
  const ModelContext context = prepared_context(trainer_qlora("0.43.1", KbitPrep::kPeft));
  const graph::Node& q = node_named(context.graph, "model.layers.2.self_attn.q_proj");
  const std::string cast_prefix = q.name + ".cast:";
  REQUIRE(q.inputs.front().starts_with(cast_prefix));
  CHECK(keeps_input(q, q.inputs.front().substr(cast_prefix.size())));
  CHECK_FALSE(keeps_input(q, q.inputs.front()));
}

TEST_CASE("up to 0.46 a 4-bit linear fed fp32 holds the weight three times in 16 bits in forward") {
  const ModelContext old = prepared_context(trainer_qlora("0.46.1", KbitPrep::kPeft));
  const ModelContext current = prepared_context(trainer_qlora("0.47.0", KbitPrep::kPeft));
  const std::string name = "model.layers.5.mlp.gate_proj";
  const graph::Node& a = node_named(old.graph, name);
  const graph::Node& b = node_named(current.graph, name);
  const int64_t weight = kHidden * kMlp;
  // dequantize_4bit's bf16 weight, its .to(fp32) copy, then autocast's bf16 copy of that.
  CHECK(a.workspace_elements.at(1, 1) - b.workspace_elements.at(1, 1) == 2 * weight);
  CHECK(a.backward_workspace().at(1, 1) == b.backward_workspace().at(1, 1));
  // Fed 16 bits (no preparation), nothing changes.
  const ModelContext plain = prepared_context(trainer_qlora("0.46.1"));
  const ModelContext plain_current = prepared_context(trainer_qlora("0.47.0"));
  CHECK(node_named(plain.graph, name).workspace_elements.at(1, 1) ==
        node_named(plain_current.graph, name).workspace_elements.at(1, 1));
}

TEST_CASE("without the release the band runs from the current bitsandbytes to 0.43.1, and says so") {
  const Result<FitAnswer> open = fit(trainer_qlora(""));
  REQUIRE_MESSAGE(open.is_ok(), open.message());
  const Prediction& band = open->as_given.prediction;
  CHECK(band.peak_allocated == predict_as_given(trainer_qlora("0.43.1")).peak_allocated);
  CHECK(says_bitsandbytes(trainer_qlora("")));
  CHECK_FALSE(says_bitsandbytes(trainer_qlora("0.45.5")));
  const std::optional<RunSettings> bottom = bottom_of_band(trainer_qlora(""));
  REQUIRE(bottom.has_value());
  CHECK(predict_as_given(*bottom).peak_allocated ==
        predict_as_given(trainer_qlora("0.50.2")).peak_allocated);
  // LoRA over 16-bit weights has no 4-bit linear: no band from bitsandbytes.
  RunSettings lora = trainer_qlora("");
  lora.mode = TrainMode::kLora;
  lora.kbit_prep.reset();
  CHECK_FALSE(says_bitsandbytes(lora));
}

TEST_CASE("a pip freeze's bitsandbytes==0.43.1 reaches the 4-bit linears") {
  testing::TempDir dir;
  const std::string path = dir.file("freeze.txt");
  std::ofstream(path) << "torch==2.11.0\nbitsandbytes==0.43.1\ntransformers==5.23.0\n";
  RunSettings s = trainer_qlora("");
  REQUIRE(read_pip_freeze(path, s.versions).is_ok());
  CHECK(s.versions.at("bitsandbytes") == "0.43.1");
  CHECK(bnb_regime(s).keeps_input);
  CHECK(predict_as_given(s).peak.activations == predict_as_given(trainer_qlora("0.43.1")).peak.activations);
}

}  // namespace headroom::planner
