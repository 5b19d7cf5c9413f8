// GPTQ int4 bases for QLoRA (planner/mechanisms/gptq_linear.h): AutoGPTQ's QuantLinear storage,
// the unpacked 16-bit weight autograd keeps for dX, the unpacking's forward cost.
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "graph/graph_analysis.h"
#include "models/graph_builder.h"
#include "models/layers.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"
#include "planner/time/block_profile.h"
#include "planner/mechanisms/gptq_linear.h"
#include "planner/settings/hardware.h"
#include "planner/predict/model_context.h"
#include "planner/memory/model_states.h"
#include "planner/settings/run_settings.h"
#include "planner/mechanisms/trainability.h"

namespace headroom::planner {
namespace {

constexpr int64_t kWidth = 4096;

// One frozen 4096 x 4096 linear behind an input that needs a gradient (a block deep
// in a LoRA model: the adapters upstream train).
graph::LayerGraph frozen_linear() {
  models::GraphBuilder b;
  b.begin_block("layers.0", "layer", true);
  const std::string x = b.input("x", models::times(models::tokens(), kWidth), std::nullopt, true);
  const std::string y = b.linear("layers.0.proj", x, models::tokens(), kWidth, kWidth, false);
  models::OpSpec loss{"loss", "loss", {y}, graph::SizeExpr::constant(1), graph::DType::kF32, {}, {}, {}, {}, {}, {}};
  b.op(loss);
  graph::LayerGraph graph = b.finish();
  for (graph::Node& node : graph.nodes) {
    for (graph::Param& param : node.params) param.trainable = false;
  }
  return graph;
}

graph::Node& node_named(graph::LayerGraph& graph, const std::string& name) {
  return *std::find_if(graph.nodes.begin(), graph.nodes.end(), [&](const graph::Node& n) { return n.name == name; });
}

}  // namespace

TEST_CASE("a GPTQ linear stores half a byte per weight plus QuantLinear's buffers") {
  graph::LayerGraph graph = frozen_linear();
  graph::Node& node = node_named(graph, "layers.0.proj");
  quantize_linear_gptq(graph, node, 128);
  int64_t qweight = 0, qzeros = 0, scales = 0, g_idx = 0;
  for (const graph::Param& param : node.params) {
    const int64_t bytes = param_storage_bytes(param, Precision::kFp16Mixed);
    if (param.name.ends_with(".qweight")) qweight = bytes;
    if (param.name.ends_with(".qzeros")) qzeros = bytes;
    if (param.name.ends_with(".scales")) scales = bytes;
    if (param.name.ends_with(".g_idx")) g_idx = bytes;
  }
  // qweight int32 [4096 / 8, 4096]; qzeros int32 [4096 / 128, 4096 / 8]; scales fp16
  // [32, 4096]; g_idx int32 [4096] (qlinear_cuda_old.py register_buffer shapes).
  CHECK(qweight == 4096 / 8 * 4096 * 4);
  CHECK(qzeros == 32 * (4096 / 8) * 4);
  CHECK(scales == 32 * 4096 * 2);
  CHECK(g_idx == 4096 * 4);
  // The model still has 4096 x 4096 parameters; the buffers are not parameters.
  CHECK(model_size(graph, Precision::kFp16Mixed).total_params == 4096 * 4096);
}

TEST_CASE("a GPTQ linear keeps its unpacked fp16 weight for dX and unpacks only in forward") {
  graph::LayerGraph graph = frozen_linear();
  graph::Node& node = node_named(graph, "layers.0.proj");
  const graph::SizeExpr backward_scratch = node.backward_workspace();
  quantize_linear_gptq(graph, node, 128);
  const std::string kept = "layers.0.proj.dequantized_weight";
  const graph::Tensor* tensor = graph.find_tensor(kept);
  REQUIRE(tensor != nullptr);
  CHECK(tensor->elements.at(1, 1) == kWidth * kWidth);
  CHECK(std::any_of(node.saves.begin(), node.saves.end(), [&](const graph::SavedRef& saved) {
    return saved.tensor == kept && saved.when == graph::SaveWhen::kInputGrad;
  }));
  const graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  const int index = graph.producer_of(kept);
  REQUIRE(index >= 0);
  const int kept_index = static_cast<int>(tensor - graph.tensors.data());
  CHECK(std::find(analysis.blocks[0].saved_tensors.begin(), analysis.blocks[0].saved_tensors.end(), kept_index) !=
        analysis.blocks[0].saved_tensors.end());
  // Forward scratch: 3 B per weight beyond the 2-byte result, in 16-bit elements.
  CHECK(node.workspace_elements.at(1, 1) == kWidth * kWidth * 3 / 2);
  CHECK(node.backward_workspace() == backward_scratch);
  // Forward time carries the unpacking: 16.5 B per weight at 70% of bandwidth plus
  // five launches; backward does not.
  const GpuSpec gpu = find_gpu("a100-80g").value();
  graph::LayerGraph plain = frozen_linear();
  const graph::GraphAnalysis plain_analysis = graph::analyze_graph(plain);
  const NodeTimes with = node_times(graph, analysis, index, graph::DType::kF16, 1, 2048, gpu, TimeModelOptions{});
  const NodeTimes without = node_times(plain, plain_analysis, plain.producer_of(plain.nodes[index].outputs[0]),
                                       graph::DType::kF16, 1, 2048, gpu, TimeModelOptions{});
  const double unpack = kWidth * kWidth * 16.5 / (gpu.memory_bandwidth_gbps * 1e9 * 0.7) * 1e3 + 5 * 0.005;
  CHECK(with.fwd_ms - without.fwd_ms == doctest::Approx(unpack).epsilon(0.02));
  CHECK(with.bwd_ms == doctest::Approx(without.bwd_ms).epsilon(0.02));
}

TEST_CASE("quant gptq is QLoRA's, in 16 bits, with a positive group size") {
  RunSettings s;
  s.model = "tiny-llama";
  s.mode = TrainMode::kQlora;
  s.quant = QuantFormat::kGptq;
  CHECK(validate_settings(s, "run.json").is_ok());
  Result<RunSettings> back = settings_from_json(settings_to_json(s), "run.json");
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  CHECK(back->quant == QuantFormat::kGptq);
  CHECK(back->gptq_group_size == 128);
  RunSettings lora = s;
  lora.mode = TrainMode::kLora;
  CHECK(validate_settings(lora, "run.json").message().find("run.json: quant: ") == 0);
  RunSettings fp32 = s;
  fp32.precision = Precision::kFp32;
  CHECK(validate_settings(fp32, "run.json").message().find("run.json: quant: ") == 0);
  RunSettings group = s;
  group.gptq_group_size = 0;
  CHECK(validate_settings(group, "run.json").message().find("run.json: gptq_group_size: ") == 0);
  group.gptq_group_size = -1;  // one group per linear
  CHECK(validate_settings(group, "run.json").is_ok());
  RunSettings nf4 = s;
  nf4.quant = QuantFormat::kNf4;
  nf4.gptq_group_size = 64;  // meaningless without a GPTQ base
  CHECK(validate_settings(nf4, "run.json").message().find("run.json: gptq_group_size: ") == 0);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("compiled, a GPTQ linear's unpacking is one fused kernel: the packed codes in, the fp16 weight out") {
  RunSettings s;
  s.model = "tiny-llama";
  s.gpu = "a100-80g";
  s.mode = TrainMode::kQlora;
  s.quant = QuantFormat::kGptq;
  s.precision = Precision::kFp16Mixed;
  const auto unpack_ms = [&](bool compile) {
    RunSettings run = s;
    run.compile = compile;
    Result<ModelContext> context = prepare_context(run);
    REQUIRE_MESSAGE(context.is_ok(), context.message());
    const graph::GraphAnalysis& analysis = context->analysis;
    graph::LayerGraph plain = context->graph;
    int node = -1;
    double weights = 0;
    for (size_t n = 0; n < plain.nodes.size() && node < 0; ++n) {
      for (graph::Param& param : plain.nodes[n].params) {
        if (!is_gptq_qweight(param)) continue;
        node = static_cast<int>(n);
        weights = static_cast<double>(param.elements());
        param.dtype = graph::DType::kF16;  // the same node without the unpacking
      }
    }
    REQUIRE(node >= 0);
    const double with = node_times(context->graph, analysis, node, context->compute_dtype, 1, 64, context->gpu,
                                   context->time_options).fwd_ms;
    const double without =
        node_times(plain, analysis, node, context->compute_dtype, 1, 64, context->gpu, context->time_options).fwd_ms;
    return std::pair{with - without, weights};
  };
  const auto [eager, weights] = unpack_ms(false);
  const auto [compiled, same] = unpack_ms(true);
  const double rate = find_gpu("a100-80g").value().memory_bandwidth_gbps * 1e9 * 0.7;
  CHECK(eager == doctest::Approx(weights * 16.5 / rate * 1e3 + 5 * 0.005));
  CHECK(compiled == doctest::Approx(same * 2.5 / rate * 1e3 + 0.005));
}

}  // namespace headroom::planner
