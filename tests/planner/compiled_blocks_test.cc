// torch.compile's min-cut partitioner applied to a block (planner/mechanisms/compiled_blocks.h):
// which tensors a compiled Llama block keeps, in bytes, and how fit uses it.
// docs/stacks.md, "torch.compile".
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include "models/graph_builder.h"
#include "planner/time/block_profile.h"
#include "planner/mechanisms/compiled_blocks.h"
#include "planner/predict/planner.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

std::set<std::string> names(const graph::LayerGraph& graph, const std::vector<int>& tensors) {
  std::set<std::string> out;
  for (int t : tensors) out.insert(graph.tensors[t].name);
  return out;
}

}  // namespace

// torchtune copies grouped K/V to every head before SDPA (settings/stack.cc,
// resolve_repeat_kv); what the partitioner keeps of that copy is not held here:
// these tests hold the partitioner's cut over the grouped K/V.
static RunSettings grouped_kv(RunSettings s) {
  s.repeat_kv = false;
  return s;
}

TEST_CASE("a compiled Llama block keeps matmul and attention inputs, recomputes norms and SiLU") {
  Result<ModelContext> eager = prepare_context(grouped_kv(torchtune_llama_1b(false)));
  REQUIRE_MESSAGE(eager.is_ok(), eager.message());
  const int block = block_ending(eager->graph, ".layers.1");
  const std::string p = "model.layers.1.";
  const std::vector<int> cut = partitioner_saves(eager->graph, eager->analysis, block, eager->compute_dtype, 2, 1024);
  // The block input replaces the f32 copy and the normalized tensor of the Python
  // RMSNorm (both recomputed from it and rstd); o_proj's output stands for the
  // residual sum (recomputing the add from it is cheaper than saving an unfused
  // value); SiLU's output is recomputed from gate_proj's.
  const std::set<std::string> expected = {
      "model.layers.0.residual_mlp", p + "input_layernorm", p + "input_layernorm:rstd",
      p + "self_attn.q.rope", p + "self_attn.k.rope", p + "self_attn.v_proj", p + "self_attn.sdpa",
      p + "self_attn.sdpa:lse", p + "self_attn.o_proj", p + "post_attention_layernorm",
      p + "post_attention_layernorm:rstd", p + "mlp.gate_proj", p + "mlp.up_proj", p + "mlp.act_mul_up",
      "model.rotary_emb.cos", "model.rotary_emb.sin"};
  CHECK(names(eager->graph, cut) == expected);
}

TEST_CASE("compile cuts a Python-RMSNorm Llama block's saved bytes by 30%") {
  // Llama-3.2-1B: hidden 2048, k/v 512, MLP 8192, 32 heads; bf16, B*S = 2048 tokens.
  const int64_t tokens = 2 * 1024;
  const int64_t stats = 4 + 4 + 32 * 4;  // two f32 rstd and the f32 logsumexp per head
  const int64_t attention = 2 * (2048 + 512 + 512 + 2048);
  const int64_t eager_per_token = (4 + 2 + 2) * 2048 * 2 + attention + 4 * 2 * 8192 + stats;
  const int64_t compiled_per_token = 2 * 2048 * 4 + attention + 3 * 2 * 8192 + stats;
  for (bool compile : {false, true}) {
    Result<ModelContext> context = prepare_context(torchtune_before_0_5(grouped_kv(torchtune_llama_1b(compile))));
    REQUIRE_MESSAGE(context.is_ok(), context.message());
    const int block = block_ending(context->graph, ".layers.1");
    const StepProfile profile = profile_step(context->graph, context->analysis, context->compute_dtype, 2, 1024,
                                             Accounting::kAllocated, context->gpu);
    CAPTURE(compile);
    CHECK(profile.blocks[block].keep == tokens * (compile ? compiled_per_token : eager_per_token));
  }
  const Prediction eager = predict_as_given(torchtune_llama_1b(false));
  const Prediction compiled = predict_as_given(torchtune_llama_1b(true));
  CHECK(compiled.peak_allocated < eager.peak_allocated);
}

TEST_CASE("the partitioner saves a graph input rather than recompute from an unfused value") {
  // x -> x*0.5 -> SiLU -> linear: SiLU's backward reads its input t (eager keeps
  // t). Saving t costs twice its bytes (it would be fused away) at distance 1;
  // saving x costs its bytes at distance 2: 1.21 < 2.2, so x is kept and t is
  // recomputed. The linear's input is read by an mm in backward: kept.
  models::GraphBuilder b;
  b.begin_block("block", "mlp", true);
  const std::string x = b.input("x", graph::SizeExpr::per_token(64), std::nullopt, true);
  const std::string half = b.copy("half", "mul_scalar", {x}, graph::SizeExpr::per_token(64));
  const std::string act = b.activation("act", half, graph::SizeExpr::per_token(64), "silu");
  b.linear("proj", act, graph::SizeExpr::per_token(1), 64, 64, false);
  graph::LayerGraph graph = b.finish();
  graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  CHECK(names(graph, analysis.blocks[0].saved_tensors) == std::set<std::string>{"half", "act"});
  CHECK(names(graph, partitioner_saves(graph, analysis, 0, graph::DType::kBF16, 1, 8)) ==
        std::set<std::string>{"x", "act"});
  apply_compiled_blocks(graph, analysis, graph::DType::kBF16, 1, 8);
  CHECK(names(graph, analysis.blocks[0].saved_tensors) == std::set<std::string>{"act"});
}

}  // namespace headroom::planner


namespace headroom::planner {

TEST_CASE("a compiled block's own tensors are held by no Python frame") {
  // Eager, LlamaMLP.forward holds its input x until down_proj returns (models/llama.cc);
  // compiled, inductor frees the post-attention norm's output after up_proj reads it.
  for (bool compile : {false, true}) {
    Result<ModelContext> c = prepare_context(grouped_kv(torchtune_llama_1b(compile)));
    REQUIRE_MESSAGE(c.is_ok(), c.message());
    int down = -1;
    for (size_t n = 0; n < c->graph.nodes.size(); ++n) {
      if (c->graph.nodes[n].name == "model.layers.1.mlp.down_proj") down = static_cast<int>(n);
    }
    const int y = graph::tensor_index(c->graph, "model.layers.1.post_attention_layernorm");
    REQUIRE(down >= 0);
    REQUIRE(y >= 0);
    const std::vector<int>& holds = c->analysis.node_holds[static_cast<size_t>(down)];
    CAPTURE(compile);
    CHECK((std::find(holds.begin(), holds.end(), y) != holds.end()) == !compile);
  }
}

}  // namespace headroom::planner
