// Op-level selective activation checkpointing as torchtitan applies it
// (planner/mechanisms/selective_checkpoint.h): which outputs a checkpointed Llama block
// keeps, what that costs in bytes and saves in recompute time, and how the
// stack setting and the simulator use it. docs/stacks.md, "Checkpointing".
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "planner/time/block_profile.h"
#include "planner/settings/stack.h"
#include "planner/settings/settings_json.h"
#include "planner/predict/planner.h"
#include "planner/mechanisms/selective_checkpoint.h"
#include "planner/predict/simulator.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

RunSettings torchtitan_8b(std::optional<Recompute> recompute) {
  RunSettings s;
  s.model = "llama-3-8b";
  s.gpu = "h100-sxm";
  s.precision = Precision::kBf16Mixed;
  s.micro_batch = 2;
  s.seq_len = 1024;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.stack = Stack::kTorchtitan;
  s.recompute = recompute;
  return s;
}

// The tensor names kept, each less the block's prefix ("model.layers.0").
std::set<std::string> kept_suffixes(const ModelContext& context, int block) {
  const std::string prefix = context.graph.blocks[block].name;
  std::set<std::string> out;
  for (int t : context.checkpoint_saves.at(block)) {
    const std::string& name = context.graph.tensors[t].name;
    REQUIRE(name.starts_with(prefix));
    out.insert(name.substr(prefix.size()));
  }
  return out;
}

}  // namespace

TEST_CASE("torchtitan's op policy keeps mm 1, 3, 5, 7 of a Llama block and the attention output") {
  Result<ModelContext> context = prepare_context(torchtitan_8b(Recompute::kSelectiveOp));
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const int block = block_ending(context->graph, ".layers.0");
  // Python order q, k, v, o, gate (w1), up (w3), down (w2): the odd-numbered mms stay.
  const std::set<std::string> expected = {".self_attn.q_proj", ".self_attn.v_proj", ".self_attn.sdpa",
                                          ".self_attn.sdpa:lse", ".mlp.gate_proj", ".mlp.down_proj"};
  CHECK(kept_suffixes(context.value(), block) == expected);

  // Bytes at B=2, S=1024, bf16: q 4096 + v 1024 + attention 4096 + gate 14336 + down 4096
  // columns, plus the f32 logsumexp of 32 heads; the block input (4096 columns) as before.
  const int64_t tokens = 2 * 1024;
  const int64_t held = tokens * (4096 + 1024 + 4096 + 14336 + 4096) * 2 + tokens * 32 * 4;
  const StepProfile whole = profile_step(context->graph, context->analysis, context->compute_dtype, 2, 1024,
                                         Accounting::kAllocated, context->gpu);
  const StepProfile selective = profile_step(context->graph, context->analysis, context->compute_dtype, 2, 1024,
                                             Accounting::kAllocated, context->gpu, {}, context->checkpoint_saves);
  CHECK(whole.blocks[block].checkpoint == tokens * 4096 * 2);
  CHECK(selective.blocks[block].checkpoint == whole.blocks[block].checkpoint + held);
  // The kept ops are not run again: four of seven GEMMs and the attention kernel.
  CHECK(whole.blocks[block].recompute_ms == doctest::Approx(whole.blocks[block].fwd_ms));
  CHECK(selective.blocks[block].recompute_ms < 0.6 * selective.blocks[block].fwd_ms);
  CHECK(selective.blocks[block].fwd_peak_nograd > whole.blocks[block].fwd_peak_nograd);
}

TEST_CASE("a linear with a bias is aten.addmm: neither saved nor counted by the policy") {
  graph::LayerGraph graph;
  graph.name = "two-linears";
  graph.blocks = {{"embed", "embedding", false}, {"layer", "mlp", true}};
  graph.tensors = {{"x", graph::SizeExpr::per_token(8), std::nullopt, true},
                   {"a", graph::SizeExpr::per_token(8), std::nullopt, false},
                   {"b", graph::SizeExpr::per_token(8), std::nullopt, false},
                   {"c", graph::SizeExpr::per_token(8), std::nullopt, false}};
  auto linear = [](const std::string& name, const std::string& in, bool bias) {
    graph::Node node;
    node.name = name;
    node.op = "linear";
    node.block = 1;
    node.inputs = {in};
    node.outputs = {name == "l1" ? "a" : name == "l2" ? "b" : "c"};
    node.params.push_back({name + ".weight", {8, 8}, graph::DType::kBF16, true, ""});
    if (bias) node.params.push_back({name + ".bias", {8}, graph::DType::kBF16, true, ""});
    node.saves = {{in, graph::SaveWhen::kParamGrad}};
    return node;
  };
  graph.nodes = {linear("l1", "x", true), linear("l2", "a", false), linear("l3", "b", false)};
  const graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  const std::vector<std::vector<int>> saves = selective_op_saves(graph, analysis);
  REQUIRE(saves.size() == 2);
  CHECK(saves[0].empty());
  // l1 (addmm) is skipped, so l2 is mm 1 (kept) and l3 is mm 2 (recomputed).
  REQUIRE(saves[1].size() == 1);
  CHECK(graph.tensors[saves[1][0]].name == "b");
}

TEST_CASE("torchtitan leaves whole-block or selective recompute open, --recompute pins it") {
  const ResolvedStack open = resolve_stack(torchtitan_8b(std::nullopt));
  CHECK(open.top.recompute == Recompute::kSelectiveOp);
  CHECK(open.bottom.recompute == Recompute::kBlock);
  CHECK(std::any_of(open.unknowns.begin(), open.unknowns.end(),
                    [](const std::string& u) { return u.find("--recompute") != std::string::npos; }));
  auto names_recompute = [](const ResolvedStack& resolved) {
    return std::any_of(resolved.unknowns.begin(), resolved.unknowns.end(),
                       [](const std::string& u) { return u.find("--recompute") != std::string::npos; });
  };
  const ResolvedStack pinned = resolve_stack(torchtitan_8b(Recompute::kBlock));
  CHECK(pinned.top.recompute == Recompute::kBlock);
  CHECK_FALSE(names_recompute(pinned));
  // Without checkpointing it cannot matter, so it widens nothing.
  RunSettings none = torchtitan_8b(std::nullopt);
  none.checkpointing = CheckpointPolicy::kNone;
  CHECK_FALSE(names_recompute(resolve_stack(none)));
  // Other stacks recompute whole blocks.
  RunSettings tune = torchtitan_8b(std::nullopt);
  tune.stack = Stack::kTorchtune;
  CHECK(resolve_stack(tune).top.recompute == Recompute::kBlock);
  CHECK(parse_recompute("selective-op") == Recompute::kSelectiveOp);
  CHECK_FALSE(parse_recompute("selective").has_value());
}

TEST_CASE("selective recompute raises the peak by what the blocks hold, in the walk and the simulator") {
  // LoRA at 4096 tokens: activations, not gradients or the optimizer step, set the
  // peak, at the start of backward when every block holds what it keeps.
  RunSettings s = torchtitan_8b(Recompute::kBlock);
  s.seq_len = 4096;
  s.mode = TrainMode::kLora;
  const Prediction whole = predict_as_given(s);
  s.recompute = Recompute::kSelectiveOp;
  const Prediction selective = predict_as_given(s);
  REQUIRE(selective.where.phase != "optimizer step");
  // 32 blocks hold the policy's outputs until their backward: the step peak
  // rises by about 31 of them (the last block's are freed at once).
  const int64_t tokens = 2 * 4096;
  const int64_t held_per_block = tokens * (4096 + 1024 + 4096 + 14336 + 4096) * 2 + tokens * 32 * 4;
  const int64_t walk_rise = selective.peak_allocated - whole.peak_allocated;
  const int64_t simulated_rise = selective.simulated_peak_allocated - whole.simulated_peak_allocated;
  CHECK(walk_rise > 30 * held_per_block);
  CHECK(walk_rise < 33 * held_per_block);
  CHECK(simulated_rise > 30 * held_per_block);
  CHECK(simulated_rise < 33 * held_per_block);
  // Less is recomputed, so the step is faster.
  CHECK(selective.time.step_ms < whole.time.step_ms);
}

TEST_CASE("the recompute setting round-trips through settings JSON") {
  RunSettings s = torchtitan_8b(Recompute::kSelectiveOp);
  const nlohmann::json j = settings_to_json(s);
  CHECK(j["recompute"] == "selective-op");
  Result<RunSettings> back = settings_from_json(j, "test");
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  CHECK(back->recompute == Recompute::kSelectiveOp);
  nlohmann::json bad = j;
  bad["recompute"] = "op";
  Result<RunSettings> refused = settings_from_json(bad, "test");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("recompute") != std::string::npos);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("torchtune activation offloading keeps only the forward stash of checkpoint inputs on the GPU") {
  RunSettings s = llama_lora(Stack::kTorchtune);
  s.optimizer_impl = OptimizerImpl::kFused;
  const Prediction kept = predict_as_given(s);
  s.offload_checkpoint_inputs = true;
  const Prediction offloaded = predict_as_given(s);
  // One checkpoint input: B x S x hidden in bf16. At the peak (the head, or the
  // start of backward) 32 are stored without offload; with it, the last four
  // before the head stay in the stash in forward and none in backward.
  const int64_t input = int64_t{2} * 4096 * 4096 * 2;
  const int64_t walk_drop = kept.peak_allocated - offloaded.peak_allocated;
  const int64_t simulated_drop = kept.simulated_peak_allocated - offloaded.simulated_peak_allocated;
  CHECK(walk_drop >= 27 * input);
  CHECK(walk_drop <= 32 * input);
  CHECK(simulated_drop >= 27 * input);
  CHECK(simulated_drop <= 32 * input);
  CHECK(offloaded.host_ram - kept.host_ram >= 32 * input);  // pinned host copies
}

}  // namespace headroom::planner
