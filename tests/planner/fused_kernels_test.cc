// Inductor's kernels for a compiled block (planner/mechanisms/fused_kernels.h): which ops
// share a kernel, what each kernel reads and writes, and what that does to the
// step time. docs/memory-model.md, "Time model".
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "planner/time/block_profile.h"
#include "planner/mechanisms/fused_kernels.h"
#include "planner/predict/planner.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

std::set<std::string> node_names(const graph::LayerGraph& graph, const std::vector<int>& nodes) {
  std::set<std::string> out;
  for (int n : nodes) out.insert(graph.nodes[n].name);
  return out;
}

std::set<std::string> tensor_names(const graph::LayerGraph& graph, const std::vector<int>& tensors) {
  std::set<std::string> out;
  for (int t : tensors) out.insert(graph.tensors[t].name);
  return out;
}

}  // namespace

const FusedKernel& kernel_with(const ModelContext& context, const std::string& node_name) {
  const FusedKernels& fused = *context.time_options.fused;
  for (size_t n = 0; n < context.graph.nodes.size(); ++n) {
    if (context.graph.nodes[n].name == node_name) {
      REQUIRE_MESSAGE(fused.kernel_of[n] >= 0, node_name << " is in no kernel");
      return fused.kernels[fused.kernel_of[n]];
    }
  }
  FAIL("no node " << node_name);
  return fused.kernels.front();
}

int node_index(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].name == name) return static_cast<int>(n);
  }
  FAIL("no node " << name);
  return -1;
}

TEST_CASE("a compiled Llama layer runs its pointwise ops as five kernels") {
  Result<ModelContext> compiled = prepare_context(torchtune_llama_1b(true));
  REQUIRE_MESSAGE(compiled.is_ok(), compiled.message());
  const graph::LayerGraph& graph = compiled->graph;
  const std::string p = "model.layers.1.";
  const FusedKernel& norm = kernel_with(compiled.value(), p + "input_layernorm");
  CHECK(node_names(graph, norm.nodes) == std::set<std::string>{p + "input_layernorm"});
  // It reads the residual stream and writes what the q/k/v matmuls read and the
  // partitioner saves; the Python RMSNorm's f32 copy and normalized tensor stay
  // in registers.
  CHECK(tensor_names(graph, norm.reads) == std::set<std::string>{"model.layers.0.residual_mlp"});
  CHECK(tensor_names(graph, norm.writes) ==
        std::set<std::string>{p + "input_layernorm", p + "input_layernorm:rstd"});
  // Rotary embedding: both products and their sum; rotate_half is a cat, an
  // extern kernel, so it is read back.
  CHECK(node_names(graph, kernel_with(compiled.value(), p + "self_attn.q.rope").nodes) ==
        std::set<std::string>{p + "self_attn.q.cos", p + "self_attn.q.sin", p + "self_attn.q.rope"});
  CHECK(tensor_names(graph, kernel_with(compiled.value(), p + "self_attn.q.rope").reads) ==
        std::set<std::string>{p + "self_attn.q_proj", p + "self_attn.q.rotate_half", "model.rotary_emb.cos",
                              "model.rotary_emb.sin"});
  // The residual add after attention fuses with the norm that reads it.
  CHECK(node_names(graph, kernel_with(compiled.value(), p + "post_attention_layernorm").nodes) ==
        std::set<std::string>{p + "residual_attn", p + "post_attention_layernorm"});
  CHECK(node_names(graph, kernel_with(compiled.value(), p + "mlp.act_mul_up").nodes) ==
        std::set<std::string>{p + "mlp.act_fn", p + "mlp.act_mul_up"});
  // The add after the MLP reads residual_attn too, but joining it to that
  // kernel would make one kernel wait for the MLP's matmuls, which wait for it.
  CHECK(node_names(graph, kernel_with(compiled.value(), p + "residual_mlp").nodes) ==
        std::set<std::string>{p + "residual_mlp"});
  // Matmuls and attention are their own kernels.
  CHECK(compiled->time_options.fused->kernel_of[node_index(graph, p + "mlp.down_proj")] == -1);
  CHECK(compiled->time_options.fused->kernel_of[node_index(graph, p + "self_attn.sdpa")] == -1);
}

TEST_CASE("eager RMSNorm pays for its Python ops, compiled, for one read and one write") {
  // Llama-3.2-1B, hidden 2048, B*S = 2048 tokens, bf16, A100 80GB (2,039 GB/s at
  // the default 70% efficiency), 5 us per launch.
  const double elements = 2048.0 * 2048.0;
  const double rows = 2048.0;
  const double weight = 2048.0 * 2;
  const double bytes_per_ms = 2039e9 * 0.7 / 1e3;
  const double launch = 0.005;
  Result<ModelContext> eager = prepare_context(torchtune_before_0_5(torchtune_llama_1b(false)));
  Result<ModelContext> compiled = prepare_context(torchtune_before_0_5(torchtune_llama_1b(true)));
  REQUIRE(eager.is_ok());
  REQUIRE(compiled.is_ok());
  const int norm = node_index(eager->graph, "model.layers.1.input_layernorm");
  REQUIRE(node_index(compiled->graph, "model.layers.1.input_layernorm") == norm);
  // Eager (transformers' LlamaRMSNorm): x, the 16-bit normalized written and
  // read, y: 4 bytes x 2 per element, and 2 bytes per row of statistics; seven
  // f32 passes (x32 written, read by pow and by the multiply; pow's output
  // written and read by mean; the f32 normalized written and read by the cast).
  const NodeTimes eager_times = node_times(eager->graph, eager->analysis, norm, eager->compute_dtype, 2, 1024,
                                           eager->gpu, eager->time_options);
  CHECK(eager_times.fwd_ms == doctest::Approx(((4 * 2 + 7 * 4) * elements + 2 * rows + weight) / bytes_per_ms + launch));
  // Compiled: x read, y and the f32 rstd written.
  const NodeTimes compiled_times = node_times(compiled->graph, compiled->analysis, norm, compiled->compute_dtype, 2,
                                              1024, compiled->gpu, compiled->time_options);
  CHECK(compiled_times.fwd_ms == doctest::Approx((4 * elements + 4 * rows + weight) / bytes_per_ms + launch));
}

TEST_CASE("a kernel's traffic and launch sit on its lead node only") {
  Result<ModelContext> compiled = prepare_context(torchtune_llama_1b(true));
  REQUIRE(compiled.is_ok());
  const FusedKernel& rope = kernel_with(compiled.value(), "model.layers.1.self_attn.q.rope");
  const int follower = node_index(compiled->graph, "model.layers.1.self_attn.q.rope");
  REQUIRE(rope.lead != follower);
  const NodeTimes lead = node_times(compiled->graph, compiled->analysis, rope.lead, compiled->compute_dtype, 2, 1024,
                                    compiled->gpu, compiled->time_options);
  const NodeTimes other = node_times(compiled->graph, compiled->analysis, follower, compiled->compute_dtype, 2, 1024,
                                     compiled->gpu, compiled->time_options);
  CHECK(lead.fwd_ms > 0.005);
  CHECK(other.fwd_ms < 0.001);  // its FLOPs only: no traffic, no launch
}

TEST_CASE("compile makes a Llama step faster by the memory-bound traffic it removes") {
  const Prediction eager = predict_as_given(torchtune_llama_1b(false));
  const Prediction compiled = predict_as_given(torchtune_llama_1b(true));
  CHECK(compiled.time.step_ms < eager.time.step_ms);
  CHECK(compiled.time.step_ms > 0.6 * eager.time.step_ms);  // matmuls and attention are unchanged
}

}  // namespace headroom::planner
