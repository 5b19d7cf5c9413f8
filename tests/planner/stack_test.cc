// The training stack (planner/settings/stack.h): the table and its overrides, the
// optimizer step by implementation (planner/memory/optimizer_step.h), the loss
// variants (planner/mechanisms/loss_variants.h), and the band with its TIGHT verdict.
// Byte figures follow docs/stacks.md; sources are cited there.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "models/graph_builder.h"
#include "models/zoo.h"
#include "planner/settings/settings_json.h"
#include "planner/time/block_profile.h"
#include "planner/settings/hardware.h"
#include "planner/mechanisms/loss_variants.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/model_states.h"
#include "planner/memory/optimizer_step.h"
#include "planner/predict/planner.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

const graph::Node& loss_node(const graph::LayerGraph& graph) {
  for (const graph::Node& node : graph.nodes) {
    if (node.op == "loss") return node;
  }
  FAIL("no loss node");
  return graph.nodes.front();
}

}  // namespace

TEST_CASE("a stack pins its mechanisms, what it leaves open is a band, overrides pin") {
  RunSettings s;
  const ResolvedStack unspecified = resolve_stack(s);
  CHECK(unspecified.unknowns.size() == 2);
  CHECK(unspecified.top.optimizer_impl == OptimizerImpl::kForeach);
  CHECK(unspecified.bottom.optimizer_impl == OptimizerImpl::kFused);
  CHECK(unspecified.top.loss.impl == LossImpl::kFullKeepLogits);
  CHECK(unspecified.bottom.loss.impl == LossImpl::kFull);

  s.stack = Stack::kTorchAmp;
  CHECK(resolve_stack(s).unknowns.empty());
  // transformers' release still decides whether SDPA gets grouped K/V (versions_test.cc).
  CHECK(resolve_stack(s).repeat_kv_open);
  s.repeat_kv = false;
  // and whether Qwen2's layers cache RoPE tables (rope_caches_test.cc).
  CHECK(resolve_stack(s).layer_rope_caches_open);
  s.layer_rope_caches = false;
  CHECK_FALSE(bottom_of_band(s).has_value());
  s.repeat_kv.reset();
  s.layer_rope_caches.reset();

  s.stack = Stack::kTorchtune;
  CHECK(resolve_stack(s).top.loss == LossSpec{LossImpl::kChunked, 8});
  CHECK(resolve_stack(s).unknowns.size() == 1);  // fused: True or not
  s.optimizer_impl = OptimizerImpl::kFused;
  CHECK(resolve_stack(s).unknowns.empty());
  CHECK(resolve_stack(s).top.optimizer_impl == OptimizerImpl::kFused);

  s.stack = Stack::kUnspecified;
  s.loss = LossSpec{LossImpl::kNoUpcast, 8};
  s.repeat_kv = true;
  s.layer_rope_caches = true;
  const std::optional<RunSettings> bottom = bottom_of_band(s);
  CHECK_FALSE(bottom.has_value());  // optimizer and loss both pinned
}

TEST_CASE("whether compile covers the loss: torchtune's chunked only, torchtitan's a band, an override pins") {
  RunSettings s;
  s.stack = Stack::kTorchtitan;
  s.loss = LossSpec{LossImpl::kFull, 8};
  CHECK(resolve_stack(s).unknowns.size() == 1);  // the optimizer: fused since 2025-02, foreach before
  CHECK(resolve_stack(s).top.optimizer_impl == OptimizerImpl::kForeach);
  s.optimizer_impl = OptimizerImpl::kFused;
  CHECK(resolve_stack(s).unknowns.empty());  // eager: nothing to compile
  s.compile = true;
  const ResolvedStack titan = resolve_stack(s);
  REQUIRE(titan.unknowns.size() == 1);
  CHECK(titan.unknowns.front().find("--compile-loss") != std::string::npos);
  CHECK_FALSE(titan.top.compile_loss);  // eager log-probabilities: the top of the band
  CHECK(titan.bottom.compile_loss);
  REQUIRE(bottom_of_band(s).has_value());
  CHECK(bottom_of_band(s)->compile_loss == true);
  s.compile_loss = true;
  CHECK(resolve_stack(s).unknowns.empty());
  CHECK(resolve_stack(s).top.compile_loss);

  // torchtune's recipes drop compile_loss's return value: a full loss stays eager.
  RunSettings tune;
  tune.stack = Stack::kTorchtune;
  tune.optimizer_impl = OptimizerImpl::kFused;
  tune.compile = true;
  CHECK(resolve_stack(tune).top.compile_loss);  // chunked by default
  CHECK(resolve_stack(tune).unknowns.empty());
  tune.loss = LossSpec{LossImpl::kFull, 8};
  CHECK_FALSE(resolve_stack(tune).top.compile_loss);
  CHECK_FALSE(resolve_stack(tune).bottom.compile_loss);

  RunSettings lit;
  lit.stack = Stack::kLitgpt;
  lit.compile = true;
  CHECK_FALSE(resolve_stack(lit).top.compile_loss);
  CHECK(resolve_stack(lit).unknowns.empty());
}

TEST_CASE("torchtitan's compiled loss holds 4 bytes a logit in backward where eager holds 12 and more") {
  RunSettings s;
  s.model = "llama-3-8b";
  s.stack = Stack::kTorchtitan;
  s.precision = Precision::kBf16Mixed;
  s.loss = LossSpec{LossImpl::kFull, 8};
  // Batch 4: at 2 the compiled loss's 4 B a logit falls under the end of backward,
  // where every sharded gradient and the root's reduce-scatter are live.
  s.micro_batch = 4;
  s.seq_len = 4096;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlock;
  s.gpu = "h100-sxm";
  s.gpus_per_node = 8;
  s.zero_stage = 3;  // FSDP2: the model states shrink, and the loss backward is the peak
  s.compile = true;
  s.compile_loss = false;
  const Prediction eager_loss = predict_as_given(s);
  s.compile_loss = true;
  const Prediction compiled_loss = predict_as_given(s);
  // The eager backward holds the fp32 log-probabilities, their gradient and the
  // upcast's gradient (12 B a logit); the compiled one the 16-bit logits and their
  // 16-bit gradient (4 B). The peak is in the loss for both at this vocabulary.
  CHECK(eager_loss.where.block_name == "head");
  CHECK(compiled_loss.where.block_name == "head");
  const double logits = 4.0 * 4096 * 128256;
  const double saved = static_cast<double>(eager_loss.peak_allocated - compiled_loss.peak_allocated);
  // (about 7 B a logit: lm_head's gradient is not yet made while the loss runs backward)
  CHECK(saved > 6.5 * logits);
  CHECK(saved < 10.0 * logits);
}

TEST_CASE("names parse back, and bad ones are refused") {
  for (const char* name : {"hf-trainer", "torchtune", "litgpt", "torchtitan", "deepspeed", "torch-amp", "unspecified"}) {
    const std::optional<Stack> stack = parse_stack(name);
    REQUIRE(stack.has_value());
    CHECK(stack_name(*stack) == name);
  }
  CHECK_FALSE(parse_stack("axolotl").has_value());
  CHECK(parse_loss("chunked") == LossSpec{LossImpl::kChunked, 8});
  CHECK(parse_loss("chunked:16") == LossSpec{LossImpl::kChunked, 16});
  CHECK(loss_name(*parse_loss("chunked:16")) == "chunked:16");
  CHECK_FALSE(parse_loss("chunked:0").has_value());
  CHECK_FALSE(parse_loss("chunked:8x").has_value());
  CHECK_FALSE(parse_loss("fused").has_value());
  CHECK(parse_optimizer_impl("in-backward") == OptimizerImpl::kInBackward);
  CHECK_FALSE(parse_optimizer_impl("paged").has_value());
}

TEST_CASE("settings JSON carries the stack and its overrides, bad values name the field") {
  RunSettings s;
  s.stack = Stack::kLitgpt;
  s.optimizer_impl = OptimizerImpl::kForLoop;
  s.loss = LossSpec{LossImpl::kChunked, 4};
  const nlohmann::json j = settings_to_json(s);
  CHECK(j["stack"] == "litgpt");
  CHECK(j["optimizer_impl"] == "for-loop");
  CHECK(j["loss"] == "chunked:4");
  const Result<RunSettings> back = settings_from_json(j, "t.json");
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  CHECK(back->stack == Stack::kLitgpt);
  CHECK(back->optimizer_impl == OptimizerImpl::kForLoop);
  CHECK(back->loss == LossSpec{LossImpl::kChunked, 4});

  nlohmann::json bad = j;
  bad["loss"] = "chunked:-1";
  const Result<RunSettings> refused = settings_from_json(bad, "t.json");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.message().find("t.json: settings.loss") != std::string::npos);

  nlohmann::json in_backward = settings_to_json(RunSettings{});
  in_backward["optimizer_impl"] = "in-backward";
  in_backward["grad_accum"] = 4;
  const Result<RunSettings> accumulating = settings_from_json(in_backward, "t.json");
  REQUIRE_FALSE(accumulating.is_ok());
  CHECK(accumulating.message().find("optimizer_impl") != std::string::npos);
}

// torch/optim/adamw.py: foreach allocates exp_avg_sq_sqrt, one state-sized list;
// the for-loop two temporaries of one parameter; fused none.
TEST_CASE("the optimizer step: foreach, for-loop, fused, in-backward, offloaded, 8-bit") {
  OptimizerStepInputs in;
  in.gpu_state_bytes = 8'000;
  in.largest_state_bytes = 1'000;
  in.largest_grad_bytes = 500;
  in.impl = OptimizerImpl::kForeach;
  CHECK(optimizer_step_memory(in).step_transient == 4'000);
  in.impl = OptimizerImpl::kForLoop;
  CHECK(optimizer_step_memory(in).step_transient == 2'000);
  in.impl = OptimizerImpl::kFused;
  CHECK(optimizer_step_memory(in).step_transient == 0);
  in.impl = OptimizerImpl::kInBackward;
  const OptimizerStepMemory in_backward = optimizer_step_memory(in);
  CHECK(in_backward.in_backward);
  CHECK(in_backward.step_transient == 0);
  CHECK(in_backward.in_backward_bytes == 1'500);
  in.impl = OptimizerImpl::kForeach;
  in.optimizer = OptimizerKind::kAdamW8bit;  // bitsandbytes updates in place
  CHECK(optimizer_step_memory(in).step_transient == 0);
  in.optimizer = OptimizerKind::kAdamW;
  in.optimizer_on_gpu = false;  // DeepSpeedCPUAdam on the host
  CHECK(optimizer_step_memory(in).step_transient == 0);
}

// transformers optimization.py Adafactor.step: per parameter, fp32 copies of a 16-bit
// gradient and parameter and two update tensors (optimizer_step.cc).
TEST_CASE("the Adafactor step holds four fp32 copies of a bf16 parameter, two of an fp32 one") {
  CHECK(adafactor_fp32_temporaries(true) == 4);
  CHECK(adafactor_fp32_temporaries(false) == 2);
  OptimizerStepInputs in;
  in.optimizer = OptimizerKind::kAdafactor;
  in.impl = OptimizerImpl::kForLoop;
  in.largest_adafactor_step_bytes = 16'000;
  CHECK(optimizer_step_memory(in).step_transient == 16'000);
  RunSettings s;
  s.model = "gpt2";
  s.precision = Precision::kBf16Pure;
  s.optimizer = OptimizerKind::kAdafactor;
  s.optimizer_impl = OptimizerImpl::kForLoop;
  const graph::LayerGraph graph = models::build_zoo_model("gpt2", models::ZooOptions{}).value();
  // gpt2's largest parameter, the tied 50257 x 768 embedding: four fp32 tensors of it.
  const int64_t embedding_fp32 = allocated_bytes(int64_t{50257} * 768 * 4);
  CHECK(model_states(graph, s, GlobalConfig{}, Accounting::kAllocated).step_transient == 4 * embedding_fp32);
  s.precision = Precision::kFp32;
  CHECK(model_states(graph, s, GlobalConfig{}, Accounting::kAllocated).step_transient == 2 * embedding_fp32);
}

TEST_CASE("model states: foreach AdamW's temporary is one of its two states") {
  RunSettings s;
  s.model = "gpt2";
  s.precision = Precision::kBf16Pure;
  s.optimizer_impl = OptimizerImpl::kForeach;
  const graph::LayerGraph graph = models::build_zoo_model("gpt2", models::ZooOptions{}).value();
  const ModelStates foreach_states = model_states(graph, s, GlobalConfig{}, Accounting::kAllocated);
  CHECK(foreach_states.step_transient == foreach_states.optimizer / 2);
  CHECK(foreach_states.step_transient > 0);
  s.optimizer_impl = OptimizerImpl::kFused;
  CHECK(model_states(graph, s, GlobalConfig{}, Accounting::kAllocated).step_transient == 0);
}

TEST_CASE("full fine-tuning: foreach costs half the AdamW states at the step, in-backward frees gradients") {
  RunSettings s;
  s.model = "gpt2";
  s.gpu = "a100-80g";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kTorchAmp;
  s.seq_len = 128;  // every block checkpointed at a short sequence: the optimizer step is the peak
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  const Prediction fused = predict_as_given(s);
  // (fused peaks in backward, foreach at the step: its temporaries come on top of every gradient)
  s.optimizer_impl = OptimizerImpl::kForeach;
  const Prediction foreach_run = predict_as_given(s);
  s.optimizer_impl = OptimizerImpl::kInBackward;
  const Prediction in_backward = predict_as_given(s);
  CHECK(foreach_run.peak_allocated > fused.peak_allocated);
  CHECK(foreach_run.where.phase == "optimizer step");
  // At most one bf16 state of gpt2's 124M parameters (the step now sets the peak).
  CHECK(foreach_run.peak_allocated - fused.peak_allocated <= 125e6 * 2);
  CHECK(in_backward.peak_allocated < fused.peak_allocated);
  CHECK(in_backward.peak.gradients < fused.peak.gradients);
}

TEST_CASE("loss variants rewrite the loss node: what is saved, how large the logits are") {
  const graph::LayerGraph original = models::build_zoo_model("llama-3-8b", models::ZooOptions{}).value();
  const graph::Node& node = loss_node(original);
  const graph::Node& upcast = *original.find_node(node.name + ".upcast");
  const std::string logits = upcast.inputs.front();
  const std::string logits_f32 = node.inputs.front();
  const std::string log_probs = node.name + ":log_probs";
  REQUIRE(saves(upcast, logits));
  REQUIRE(saves(node, log_probs));
  const graph::SizeExpr logits_elements = original.find_tensor(logits)->elements;
  const auto upcast_of = [&](const graph::LayerGraph& g) { return g.find_node(node.name + ".upcast"); };

  graph::LayerGraph full = original;
  apply_loss_impl(full, LossSpec{LossImpl::kFull, 8});
  CHECK_FALSE(saves(*upcast_of(full), logits));
  CHECK(saves(loss_node(full), log_probs));

  graph::LayerGraph chunked = original;
  apply_loss_impl(chunked, LossSpec{LossImpl::kChunked, 8});
  CHECK_FALSE(saves(*upcast_of(chunked), logits));
  CHECK(saves(loss_node(chunked), log_probs));
  CHECK(chunked.find_tensor(logits)->elements.at(2, 4096) == logits_elements.at(2, 4096));  // all chunks at once
  // One chunk's f32 copy, and in backward one chunk's gradients, at a time.
  CHECK(chunked.find_tensor(logits_f32)->elements.at(2, 4096) == logits_elements.at(2, 4096) / 8);
  CHECK(loss_node(chunked).backward_workspace().at(2, 4096) == node.backward_workspace().at(2, 4096) / 8);
  CHECK(chunked.find_tensor(log_probs)->dtype == graph::DType::kF32);

  // Compiled (torchtune compile_loss): N head/loss pairs (TransformerDecoder with
  // num_output_chunks); each loss keeps its 16-bit chunk and, of the log-probabilities,
  // only max and log-sum-exp per token (fp32, 8 bytes a token); no fp32 upcast.
  graph::LayerGraph compiled = original;
  apply_loss_impl(compiled, LossSpec{LossImpl::kChunked, 8}, /*compiled=*/true);
  int losses = 0;
  int heads = 0;
  int64_t logits_bytes = 0;
  int64_t stats_bytes = 0;
  int64_t weight_owners = 0;
  for (const graph::Node& n : compiled.nodes) {
    if (n.op == "loss") {
      ++losses;
      REQUIRE(n.inputs.front() == logits + "#chunk" + std::to_string(losses - 1));
      CHECK(saves(n, n.inputs.front()));
      CHECK(n.workspace_elements.is_zero());
      CHECK(n.backward_workspace().is_zero());
      logits_bytes += graph::tensor_bytes(*compiled.find_tensor(n.inputs.front()), graph::DType::kBF16, 2, 4096);
      stats_bytes += graph::tensor_bytes(*compiled.find_tensor(n.name.substr(0, n.name.find('#')) + ":log_probs" +
                                                                n.name.substr(n.name.find('#'))),
                                         graph::DType::kBF16, 2, 4096);
    }
    if (n.linear && n.outputs.front().starts_with(logits + "#chunk")) {
      ++heads;
      for (const graph::Param& p : n.params) weight_owners += p.tied_to.empty() ? 1 : 0;
    }
  }
  CHECK(losses == 8);
  CHECK(heads == 8);
  CHECK(weight_owners == 1);  // one lm_head weight, shared by the chunks
  CHECK(logits_bytes == 2 * logits_elements.at(2, 4096));  // all chunks: the 16-bit logits once
  // 8 bytes a token in all, each chunk's coefficient rounded up (SizeExpr holds integers).
  CHECK(stats_bytes >= 2 * 4096 * 8);
  CHECK(stats_bytes <= 2 * 4096 * 4 * 8);
  CHECK(compiled.find_tensor(logits) == nullptr);
  CHECK(upcast_of(compiled) == nullptr);  // fused into the reductions
  // Autograd frees each chunk's saved logits as its gradient is made: the head
  // block's backward holds all logits plus one chunk's gradient, not two full sets.
  {
    RunSettings run;
    run.model = "llama-3-8b";
    run.mode = TrainMode::kLora;
    run.micro_batch = 2;
    run.seq_len = 4096;
    run.checkpointing = CheckpointPolicy::kEveryBlock;
    run.stack = Stack::kTorchtune;
    run.optimizer_impl = OptimizerImpl::kFused;
    run.compile = true;
    Result<ModelContext> context = prepare_context(run);
    REQUIRE_MESSAGE(context.is_ok(), context.message());
    const StepProfile profile = profile_step(context->graph, context->analysis, context->compute_dtype, 2, 4096,
                                             Accounting::kAllocated, context->gpu);
    const BlockProfile& head_block = profile.blocks.back();
    const int64_t all_logits = 2 * logits_elements.at(2, 4096);
    CHECK(head_block.bwd_peak - head_block.keep - head_block.out_grad < all_logits / 4);
  }

  // A compiled full loss (torchtitan's compiled cross_entropy_loss): one kernel over
  // the whole logits, no fp32 copy; it saves the 16-bit logits and two fp32
  // statistics per token, with or without the caller keeping the output.
  for (LossImpl impl : {LossImpl::kFull, LossImpl::kFullKeepLogits}) {
    graph::LayerGraph full_compiled = original;
    apply_loss_impl(full_compiled, LossSpec{impl, 8}, /*compiled=*/true);
    CHECK(upcast_of(full_compiled) == nullptr);
    const graph::Node& compiled_loss = loss_node(full_compiled);
    CHECK(compiled_loss.inputs.front() == logits);
    CHECK(saves(compiled_loss, logits));
    CHECK(compiled_loss.backward_workspace().is_zero());
    const graph::Tensor& stats = *full_compiled.find_tensor(log_probs);
    CHECK(graph::tensor_bytes(stats, graph::DType::kBF16, 2, 4096) == 2 * 4096 * 8);
  }
  // The variants that never upcast, or copy first, are priced as eager.
  graph::LayerGraph shifted_compiled = original;
  apply_loss_impl(shifted_compiled, LossSpec{LossImpl::kShiftCopy, 8}, /*compiled=*/true);
  CHECK(shifted_compiled.find_tensor(log_probs)->elements.at(2, 4096) == logits_elements.at(2, 4096));

  // Qwen (v1) remote code: a contiguous 16-bit copy of the shifted logits lives
  // beside the fp32 upcast; saved as `full`.
  graph::LayerGraph shifted = original;
  apply_loss_impl(shifted, LossSpec{LossImpl::kShiftCopy, 8});
  CHECK_FALSE(saves(*upcast_of(shifted), logits));
  CHECK(saves(loss_node(shifted), log_probs));
  CHECK(upcast_of(shifted)->workspace_elements.at(2, 4096) == logits_elements.at(2, 4096));
  CHECK(parse_loss("shift-copy") == LossSpec{LossImpl::kShiftCopy, 8});

  // `full`: the model's output holds the 16-bit logits while the loss runs forward
  // (one compute-dtype element a logit), not in backward.
  // transformers < 4.49 (`upcast-shift`): the 16-bit logits are rebound to their fp32
  // upcast, and an fp32 shifted copy lives beside it in forward (2 bf16 elements a
  // logit, 1 under fp32); backward is `full`'s.
  const int64_t plain_workspace = loss_node(original).workspace_elements.at(2, 4096);
  for (const auto& [compute, per_logit] : {std::pair{graph::DType::kBF16, 2}, std::pair{graph::DType::kF32, 1}}) {
    graph::LayerGraph full = original;
    apply_loss_impl(full, LossSpec{LossImpl::kFull, 8}, false, false, compute);
    CHECK(loss_node(full).workspace_elements.at(2, 4096) == plain_workspace + logits_elements.at(2, 4096));
    CHECK(loss_node(full).backward_workspace() == loss_node(original).backward_workspace());
    graph::LayerGraph upcast_shift = original;
    apply_loss_impl(upcast_shift, LossSpec{LossImpl::kUpcastShift, 8}, false, false, compute);
    CHECK_FALSE(saves(*upcast_of(upcast_shift), logits));
    CHECK(saves(loss_node(upcast_shift), log_probs));
    CHECK(loss_node(upcast_shift).workspace_elements.at(2, 4096) ==
          plain_workspace + per_logit * logits_elements.at(2, 4096));
    CHECK(loss_node(upcast_shift).backward_workspace() == loss_node(full).backward_workspace());
  }
  CHECK(parse_loss("upcast-shift") == LossSpec{LossImpl::kUpcastShift, 8});
  // At micro-batch 1 the slice [1, S - 1, V] of the contiguous [1, S, V] logits is
  // contiguous: .contiguous() returns it, and neither variant copies (torch's
  // is_contiguous passes over a dimension of size 1).
  for (const LossImpl impl : {LossImpl::kUpcastShift, LossImpl::kShiftCopy}) {
    graph::LayerGraph one_row = original;
    apply_loss_impl(one_row, LossSpec{impl, 8}, false, false, graph::DType::kBF16, 1);
    CHECK(loss_node(one_row).workspace_elements.at(1, 4096) == loss_node(original).workspace_elements.at(1, 4096));
    CHECK(upcast_of(one_row)->workspace_elements.at(1, 4096) == upcast_of(original)->workspace_elements.at(1, 4096));
  }

  graph::LayerGraph no_upcast = original;
  apply_loss_impl(no_upcast, LossSpec{LossImpl::kNoUpcast, 8});
  CHECK(upcast_of(no_upcast) == nullptr);
  CHECK(loss_node(no_upcast).inputs.front() == logits);
  CHECK(saves(loss_node(no_upcast), logits));
  CHECK_FALSE(no_upcast.find_tensor(log_probs)->dtype.has_value());  // the compute dtype
  CHECK(loss_node(no_upcast).workspace_elements.is_zero());
  // The 16-bit gradient of the log-probs beside the logits' gradient.
  CHECK(loss_node(no_upcast).backward_workspace() == logits_elements);
}

TEST_CASE("at a 128k vocabulary the loss decides: keep-logits > Trainer's > chunked") {
  const Prediction keep = predict_as_given(llama_lora(Stack::kTorchAmp));
  const Prediction trainer = predict_as_given(llama_lora(Stack::kHfTrainer));
  RunSettings torchtune = llama_lora(Stack::kTorchtune);
  torchtune.optimizer_impl = OptimizerImpl::kFused;
  const Prediction chunked = predict_as_given(torchtune);
  CHECK(keep.peak_allocated > trainer.peak_allocated);
  CHECK(trainer.peak_allocated > chunked.peak_allocated);
  // Dropping the kept bf16 logits saves B*S*V*2 bytes (2 x 4096 x 128256 x 2), within
  // rounding, less the head's input (B*S*H*2), which the Trainer's causal-LM forward binds
  // while it computes its loss and the loop's own loss does not (head_frame_test.cc).
  CHECK(static_cast<double>(keep.peak_allocated - trainer.peak_allocated) >=
        0.999 * 2.0 * 4096 * (128256 - 4096) * 2);
}

TEST_CASE("the verdict is TIGHT when the band straddles the budget, and plans use its top") {
  RunSettings s = llama_lora(Stack::kUnspecified);
  // At B = 2 both ends of the loss band reserve the same: the kept logits fit in
  // blocks the allocator has cached by then. At B = 8 they do not.
  s.micro_batch = 8;
  s.repeat_kv = false;  // the band of the optimizer and the loss only
  const Result<FitAnswer> wide = fit(s);
  REQUIRE(wide.is_ok());
  const Prediction& p = wide->as_given.prediction;
  REQUIRE(p.gpu_total_bottom < p.gpu_total);
  CHECK(p.band_unknowns.size() == 2);
  // A GPU whose budget falls inside the band. The allocator model answers a smaller
  // GPU with less cache (it frees cached blocks and retries before it runs out), so the
  // band is taken again at the budget its first middle gives.
  s.allow_micro_batch_change = false;
  auto at_middle_of = [&s](const Prediction& band) {
    const int64_t middle = (band.gpu_total_bottom + band.gpu_total) / 2;
    s.gpu_memory_bytes = static_cast<int64_t>(static_cast<double>(middle) / (1.0 - s.safety_margin));
    return fit(s);
  };
  const Result<FitAnswer> first = at_middle_of(p);
  REQUIRE(first.is_ok());
  const Result<FitAnswer> tight = at_middle_of(first->as_given.prediction);
  REQUIRE(tight.is_ok());
  CHECK_FALSE(tight->fits);
  CHECK(tight->as_given.prediction.tight());
  // Pinning the cheap way closes the band and the run fits.
  s.stack = Stack::kHfTrainer;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions["transformers"] = "5.23.0";  // the loss of 4.49 and later
  const Result<FitAnswer> pinned = fit(s);
  REQUIRE(pinned.is_ok());
  CHECK(pinned->as_given.prediction.band_unknowns.empty());
  CHECK(pinned->fits);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("LoRA adapters: fp32 under PEFT, the model's dtype under torchtune, only pure bf16 tells them apart") {
  RunSettings s;
  s.model = "tiny-llama";
  s.mode = TrainMode::kLora;
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kFp32);
  s.stack = Stack::kTorchtune;
  CHECK(resolve_stack(s).top.adapter_dtype == AdapterDtype::kModel);
  s.stack = Stack::kUnspecified;
  const ResolvedStack open = resolve_stack(s);
  CHECK(open.top.adapter_dtype == AdapterDtype::kFp32);
  CHECK(open.bottom.adapter_dtype == AdapterDtype::kModel);
  auto names_adapters = [](const ResolvedStack& r) {
    return std::any_of(r.unknowns.begin(), r.unknowns.end(),
                       [](const std::string& u) { return u.find("--adapter-dtype") != std::string::npos; });
  };
  CHECK(names_adapters(open));
  RunSettings mixed = s;
  mixed.precision = Precision::kBf16Mixed;  // DeepSpeed-style: 16-bit module, fp32 masters either way
  CHECK_FALSE(names_adapters(resolve_stack(mixed)));

  // Bytes: an fp32 adapter has 4-byte weights, gradients and AdamW states; a bf16 one 2.
  auto states_for = [&](AdapterDtype dtype) {
    RunSettings run = s;
    run.adapter_dtype = dtype;
    Result<ModelContext> context = prepare_context(run);
    REQUIRE_MESSAGE(context.is_ok(), context.message());
    int64_t adapter_elements = 0;
    for (const graph::Node& node : context->graph.nodes) {
      for (const graph::Param& p : node.params) {
        if (p.trainable) adapter_elements += p.elements();
      }
    }
    return std::pair{model_states(context->graph, run, user_config(run), Accounting::kAllocated), adapter_elements};
  };
  const auto [fp32, elements] = states_for(AdapterDtype::kFp32);
  const auto [bf16, same_elements] = states_for(AdapterDtype::kModel);
  REQUIRE(elements == same_elements);
  REQUIRE(elements > 0);
  CHECK(fp32.optimizer == doctest::Approx(2.0 * static_cast<double>(bf16.optimizer)).epsilon(0.01));
  CHECK(fp32.params - bf16.params == doctest::Approx(2.0 * static_cast<double>(elements)).epsilon(0.01));
  CHECK(fp32.grads_full == doctest::Approx(2.0 * static_cast<double>(bf16.grads_full)).epsilon(0.01));
  CHECK(fp32.master == 0);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("the loss backward holds 12 bytes a logit: f32 log-probs, their gradient, the upcast's gradient") {
  // hidden [T, 16] -> head -> logits [T, 4096] -> lm_loss. T = B*S = 64.
  models::GraphBuilder b;
  b.begin_block("head", "head", false);
  const std::string hidden = b.input("hidden", graph::SizeExpr::per_token(16), std::nullopt, true);
  const std::string labels = b.input("labels", graph::SizeExpr::per_token(1), graph::DType::kInt64, false);
  const std::string logits = b.linear("lm_head", hidden, graph::SizeExpr::per_token(1), 16, 4096, false);
  b.lm_loss("loss", logits, labels, graph::SizeExpr::per_token(1), 4096);
  graph::LayerGraph graph = b.finish();
  apply_loss_impl(graph, LossSpec{LossImpl::kFull, 8});
  const graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  const GpuSpec gpu = find_gpu("a100-80g").value();
  const StepProfile profile =
      profile_step(graph, analysis, graph::DType::kBF16, 4, 16, Accounting::kAllocated, gpu);
  const int64_t logits_count = 64 * 4096;
  // At the loss node's backward the f32 log-probs, nll's dense f32 gradient of
  // them and log_softmax's f32 gradient of the upcast logits are alive together
  // (the head's input is a graph input: persistent, not the block's).
  CHECK(profile.blocks[0].bwd_peak == 12 * logits_count);
}

}  // namespace headroom::planner

namespace headroom::planner {

TEST_CASE("expandable segments follow the stack's launcher unless the settings say") {
  RunSettings s;
  CHECK_FALSE(uses_expandable_segments(s));
  s.stack = Stack::kTorchtitan;  // run_llama_train.sh exports expandable_segments:True
  CHECK(uses_expandable_segments(s));
  s.expandable_segments = false;
  CHECK_FALSE(uses_expandable_segments(s));
  s.stack = Stack::kHfTrainer;
  s.expandable_segments = true;
  CHECK(uses_expandable_segments(s));
  // The JSON key round-trips; absent stays absent.
  const Result<RunSettings> back = settings_from_json(settings_to_json(s), "settings");
  REQUIRE(back.is_ok());
  CHECK(back->expandable_segments == std::optional<bool>(true));
  CHECK_FALSE(settings_to_json(RunSettings{}).contains("expandable_segments"));
  // The simulator's reserved memory follows it: the same run reserves less.
  RunSettings run = llama_lora(Stack::kHfTrainer);
  run.micro_batch = 8;
  const Prediction plain = predict_as_given(run);
  run.expandable_segments = true;
  const Prediction expandable = predict_as_given(run);
  CHECK(expandable.peak_reserved < plain.peak_reserved);
  CHECK(expandable.peak_allocated == plain.peak_allocated);
}

}  // namespace headroom::planner
