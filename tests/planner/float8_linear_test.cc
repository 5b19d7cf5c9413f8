// fp8 training with torchao's Float8Linear (planner/mechanisms/float8_linear.h): which
// linears convert, what each keeps for backward in torchao 0.8 and 0.9, the fp8
// all-gather of FSDP2, the fp8 GEMM rate, and the refusals. docs/stacks.md,
// "Float8 training".
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "graph/graph_analysis.h"
#include "models/graph_builder.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"
#include "planner/time/block_profile.h"
#include "planner/mechanisms/float8_linear.h"
#include "planner/settings/hardware.h"
#include "planner/predict/model_context.h"
#include "planner/memory/model_states.h"
#include "planner/settings/run_settings.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

using graph::DType;

// A layer with two linears (64 -> 256 -> 64, no bias), one whose width is not a
// multiple of 16 (64 -> 40), and a head block with a 64 -> 128 output projection.
graph::LayerGraph small_model() {
  models::GraphBuilder b;
  b.begin_block("layers.0", "mlp", true);
  const graph::SizeExpr tokens = graph::SizeExpr::per_token(1);
  const std::string x = b.input("x", graph::SizeExpr::per_token(64), std::nullopt, true);
  const std::string h = b.linear("layers.0.up", x, tokens, 64, 256, false);
  const std::string a = b.activation("layers.0.act", h, graph::SizeExpr::per_token(256), "gelu");
  const std::string o = b.linear("layers.0.down", a, tokens, 256, 64, false);
  b.linear("layers.0.odd", o, tokens, 64, 40, false);
  b.begin_block("head", "head", false);
  b.linear("lm_head", o, tokens, 64, 128, false);
  return b.finish();
}

int64_t bytes_at(const graph::LayerGraph& graph, const std::string& tensor, int64_t batch, int64_t seq) {
  return graph::tensor_bytes(*graph.find_tensor(tensor), DType::kBF16, batch, seq);
}

RunSettings torchtitan_fp8(Float8Recipe recipe) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h100-sxm";
  s.precision = Precision::kBf16Mixed;
  s.stack = Stack::kTorchtitan;
  s.zero_stage = 3;
  s.gpus_per_node = 8;
  s.micro_batch = 1;
  s.seq_len = 2048;
  s.float8 = recipe;
  return s;
}

}  // namespace

TEST_CASE("float8 tensorwise: a layer linear reads a 1-byte copy of its input and keeps an fp8 weight for dX") {
  graph::LayerGraph graph = small_model();
  apply_float8_linears(graph, {Float8Recipe::kTensorwise, false}, DType::kBF16);
  const graph::Node& up = *graph.find_node("layers.0.up");
  CHECK(is_float8_linear(up));
  // B = 2, S = 8: 16 rows of 64 inputs at one byte; the weight 64 x 256 at one byte.
  CHECK(graph.find_tensor("layers.0.up.input_fp8")->dtype == DType::kF8E4M3);
  CHECK(bytes_at(graph, "layers.0.up.input_fp8", 2, 8) == 16 * 64);
  CHECK(bytes_at(graph, "layers.0.up.weight_fp8", 2, 8) == 64 * 256);
  // torchao >= 0.9 (matmul_with_hp_or_float8_args) keeps the 16-bit input for dW
  // and the fp8 weight for dX.
  CHECK(saves(up, "x"));
  CHECK_FALSE(saves(up, "layers.0.up.input_fp8"));
  CHECK(saves(up, "layers.0.up.weight_fp8"));
  // Backward holds the e5m2 copy of dY, 16 x 256 bytes: 2,048 bf16 elements of workspace.
  CHECK(up.backward_workspace().at(2, 8) == 16 * 256 / 2);
  // Not converted: a width that is not a multiple of 16, and the output head.
  CHECK_FALSE(is_float8_linear(*graph.find_node("layers.0.odd")));
  CHECK_FALSE(is_float8_linear(*graph.find_node("lm_head")));
  CHECK(graph.find_node("lm_head.input_fp8") == nullptr);
}

TEST_CASE("float8 in torchao 0.8 keeps the fp8 input instead of the 16-bit one") {
  graph::LayerGraph graph = small_model();
  apply_float8_linears(graph, {Float8Recipe::kTensorwiseFp8Input, false}, DType::kBF16);
  const graph::Node& up = *graph.find_node("layers.0.up");
  CHECK(saves(up, "layers.0.up.input_fp8"));
  CHECK_FALSE(saves(up, "x"));
  CHECK(saves(up, "layers.0.up.weight_fp8"));
  // Backward casts dY only: read twice at 2 bytes, written at 1 (5 bytes per element);
  // torchao 0.9 casts the saved 16-bit input again too.
  CHECK(float8_backward_cast_bytes(up, DType::kBF16, 2, 8) == doctest::Approx(16.0 * 256 * 5));
  graph::LayerGraph newer = small_model();
  apply_float8_linears(newer, {Float8Recipe::kTensorwise, false}, DType::kBF16);
  CHECK(float8_backward_cast_bytes(*newer.find_node("layers.0.up"), DType::kBF16, 2, 8) ==
        doctest::Approx(16.0 * (256 + 64) * 5));
}

TEST_CASE("with the fp8 all-gather the unsharded weight is the fp8 tensor: no copy is made or kept") {
  graph::LayerGraph graph = small_model();
  apply_float8_linears(graph, {Float8Recipe::kTensorwise, true}, DType::kBF16);
  const graph::Node& up = *graph.find_node("layers.0.up");
  CHECK(is_float8_linear(up));
  CHECK(graph.find_tensor("layers.0.up.weight_fp8") == nullptr);
  CHECK_FALSE(saves(up, "layers.0.up.weight_fp8"));
}

TEST_CASE("FSDP2 all-gathers converted weights at one byte under float8_all_gather") {
  const RunSettings bf16_gather = torchtitan_fp8(Float8Recipe::kTensorwise);
  Result<ModelContext> plain = prepare_context(bf16_gather);
  REQUIRE_MESSAGE(plain.is_ok(), plain.message());
  RunSettings s = bf16_gather;
  s.float8_all_gather = true;
  Result<ModelContext> fp8 = prepare_context(s);
  REQUIRE_MESSAGE(fp8.is_ok(), fp8.message());
  const int layer = block_ending(fp8->graph, ".layers.0");
  // Llama 3.2 1B layer: q 2048x2048, k and v 512x2048, o 2048x2048, gate and up
  // 8192x2048, down 2048x8192 (60,817,408 weights), and two RMSNorm weights of 2048.
  constexpr int64_t kLinear = 2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048;
  CHECK(block_gathered_bytes(plain->graph, bf16_gather)[layer] == 2 * (kLinear + 2 * 2048));
  CHECK(block_gathered_bytes(fp8->graph, s)[layer] == kLinear + 2 * 2 * 2048);
  const ModelStates states = model_states(fp8->graph, s, user_config(s), Accounting::kAllocated);
  CHECK(states.float8_gathered_params == 16 * kLinear);
}

TEST_CASE("an fp8 linear's GEMMs run at the fp8 peak and its published efficiency") {
  models::GraphBuilder b;
  b.begin_block("layers.0", "mlp", true);
  const std::string x = b.input("x", graph::SizeExpr::per_token(4096), std::nullopt, true);
  b.linear("layers.0.up", x, graph::SizeExpr::per_token(1), 4096, 4096, false);
  const graph::LayerGraph graph = b.finish();
  graph::LayerGraph fp8 = graph;
  apply_float8_linears(fp8, {Float8Recipe::kTensorwise, true}, DType::kBF16);
  const GpuSpec h100 = find_gpu("h100-sxm").value();
  const auto forward_ms = [&](const graph::LayerGraph& g) {
    const graph::GraphAnalysis analysis = graph::analyze_graph(g);
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      if (g.nodes[n].name == "layers.0.up") {
        return node_times(g, analysis, static_cast<int>(n), DType::kBF16, 8, 4096, h100, {}).fwd_ms;
      }
    }
    FAIL("no node layers.0.up");
    return 0.0;
  };
  // 2 x 32,768 rows x 4096 x 4096 FLOPs: compute-bound both ways; launch latency (5 us) on both.
  const double bf16_rate = 989.4 * 0.6;  // TimeModelOptions' default efficiency, no GPU override here
  const double fp8_rate = 1979.0 * (1402.6 / 1979.0);
  // The 32,768 x 4096 output is 4096 tiles of 256 x 128: 32 waves on 132 SMs, the
  // last one part-empty (planner/time/gemm_waves.h), which stretches fp8 and bf16 alike.
  const double flops = 2.0 * 8 * 4096 * 4096 * 4096 * (32.0 * 132 / 4096);
  CHECK(forward_ms(graph) == doctest::Approx(flops / (bf16_rate * 1e12) * 1e3 + 0.005).epsilon(0.01));
  CHECK(forward_ms(fp8) == doctest::Approx(flops / (fp8_rate * 1e12) * 1e3 + 0.005).epsilon(0.01));
}

TEST_CASE("float8 is refused on a GPU without fp8 tensor cores and outside full fine-tunes") {
  RunSettings s = torchtitan_fp8(Float8Recipe::kTensorwise);
  s.gpu = "a100-80g";
  const Result<ModelContext> ampere = prepare_context(s);
  REQUIRE_FALSE(ampere.is_ok());
  CHECK(ampere.message().find("float8") != std::string::npos);
  CHECK(ampere.message().find("no fp8 tensor cores") != std::string::npos);

  RunSettings lora = torchtitan_fp8(Float8Recipe::kTensorwise);
  lora.mode = TrainMode::kLora;
  const Status mode = validate_settings(lora, "test");
  REQUIRE_FALSE(mode.is_ok());
  CHECK(mode.message().find("float8") != std::string::npos);

  RunSettings gather = torchtitan_fp8(Float8Recipe::kNone);
  gather.float8_all_gather = true;
  CHECK(validate_settings(gather, "test").message().find("float8_all_gather") != std::string::npos);
  gather.float8 = Float8Recipe::kTensorwise;
  gather.zero_stage = 2;
  CHECK(validate_settings(gather, "test").message().find("zero_stage 3") != std::string::npos);
  gather.zero_stage = 3;
  CHECK(validate_settings(gather, "test").is_ok());
}

TEST_CASE("float8 settings round-trip through JSON and name a bad recipe") {
  RunSettings s = torchtitan_fp8(Float8Recipe::kTensorwiseFp8Input);
  s.float8_all_gather = true;
  const Result<RunSettings> back = settings_from_json(settings_to_json(s), "test");
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  CHECK(back->float8 == Float8Recipe::kTensorwiseFp8Input);
  CHECK(back->float8_all_gather);
  nlohmann::json bad = settings_to_json(s);
  bad["float8"] = "rowwise";
  const Result<RunSettings> refused = settings_from_json(bad, "test");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("settings.float8") != std::string::npos);
  CHECK(refused.message().find("tensorwise") != std::string::npos);
}

}  // namespace headroom::planner
