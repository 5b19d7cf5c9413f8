// Accelerate's convert_outputs_to_fp32 (accelerate 1.15.0 utils/operations.py, wrapped
// around the forward by accelerator.py prepare_model under native mixed precision): an
// fp32 copy of each 16-bit tensor the forward returns, made beside the originals once
// the forward has returned (planner/mechanisms/output_fp32_copies.h). Flan-T5 under the
// Trainer peaks there: the oracle's hf-trainer flan-t5 rows without checkpointing.
#include "planner/mechanisms/output_fp32_copies.h"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "graph/op_traits.h"
#include "planner/predict/model_context.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// A node producing `name` (`elements` elements, dtype as given) and one model_output
// node holding it and a 16-bit tensor whose dtype is the run's.
graph::LayerGraph returned(std::optional<graph::DType> dtype) {
  graph::LayerGraph g;
  g.blocks = {graph::Block{"head", "head", false}};
  g.tensors = {graph::Tensor{"logits", graph::SizeExpr::constant(64), std::nullopt},
               graph::Tensor{"hidden", graph::SizeExpr::constant(32), dtype}};
  graph::Node make;
  make.name = "make";
  make.op = "linear";
  make.outputs = {"logits", "hidden"};
  graph::Node out;
  out.name = "model_output";
  out.op = std::string(graph::op::kModelOutput);
  out.holds = {"logits", "hidden"};
  g.nodes = {make, out};
  return g;
}

RunSettings flan_t5_lora_b4(Precision precision) {
  RunSettings s = flan_t5_xl_lora(128);
  s.micro_batch = 4;
  s.precision = precision;
  return s;
}

constexpr int64_t kLogits = 4 * 128 * 32128;  // B * T * vocab
constexpr int64_t kEncoderOut = 4 * 512 * 2048;  // B * S * d_model

}  // namespace

TEST_CASE("convert_outputs_to_fp32 copies each 16-bit tensor a model_output node holds, and no fp32 one") {
  graph::LayerGraph g = returned(graph::DType::kF32);
  CHECK(apply_output_fp32_copies(g, graph::DType::kBF16) == 1);
  const graph::Node* out = g.find_node("model_output");
  REQUIRE(out != nullptr);
  REQUIRE(out->outputs == std::vector<std::string>{"logits.float"});
  const graph::Tensor* copy = g.find_tensor("logits.float");
  REQUIRE(copy != nullptr);
  CHECK(copy->dtype == graph::DType::kF32);
  CHECK(copy->elements.at(1, 1) == 64);
  // A bf16 tensor is copied whatever the run's compute dtype; an fp32 run copies no unset one.
  graph::LayerGraph fp32_run = returned(graph::DType::kBF16);
  CHECK(apply_output_fp32_copies(fp32_run, graph::DType::kF32) == 1);
  CHECK(fp32_run.find_node("model_output")->outputs == std::vector<std::string>{"hidden.float"});
}

TEST_CASE("Accelerate copies the outputs under the Trainer's 16-bit autocast, not in fp32 or another loop") {
  StackSpec top;
  top.autocast = true;
  RunSettings s = flan_t5_lora_b4(Precision::kBf16Pure);
  CHECK(accelerate_copies_outputs(s, top));
  s.precision = Precision::kBf16Amp;
  CHECK(accelerate_copies_outputs(s, top));
  s.precision = Precision::kFp32;
  CHECK_FALSE(accelerate_copies_outputs(s, top));
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kTorchtune;
  CHECK_FALSE(accelerate_copies_outputs(s, top));
  s.stack = Stack::kHfTrainer;
  top.autocast = false;  // DeepSpeed's engine: Accelerate's native_amp is off
  CHECK_FALSE(accelerate_copies_outputs(s, top));
}

TEST_CASE("Flan-T5 under the Trainer's bf16 peaks where the forward returns: fp32 copies beside the 16-bit outputs") {
  const Prediction p = predict_as_given(flan_t5_lora_b4(Precision::kBf16Pure));
  CHECK(p.where.phase == "forward");
  CHECK(p.where.block_name == "head");
  // The 16-bit logits and their fp32 copy, the bf16 encoder output and its fp32 copy,
  // the fp32 loss (one 512 B block): the oracle's transient at its peak. The decoder's
  // output died with the forward's frame; the encoder's, which no LoRA layer saves, is
  // transient too (hf-trainer/flan-t5-xl-2l/lora/bf16/none/s512t128).
  CHECK(p.peak_as_allocated.transient == kLogits * (2 + 4) + kEncoderOut * (2 + 4) + 512);
}

TEST_CASE("At a model_output node the forward's frame is gone: the head's input is not live") {
  const Result<ModelContext> c = prepare_context(flan_t5_lora_b4(Precision::kBf16Pure));
  REQUIRE(c.is_ok());
  const StepProfile profile = profile_step(c->graph, c->analysis, c->compute_dtype, 4, 512, Accounting::kAllocated,
                                           c->gpu);
  const BlockProfile& head = profile.blocks[static_cast<size_t>(block_ending(c->graph, "head"))];
  // log_softmax's saved result, the logits and their fp32 copy, the encoder output's fp32
  // copy and the loss; not the decoder's [B, T, d_model] output, read by lm_head alone.
  CHECK(head.fwd_peak == kLogits * (2 + 2 + 4) + kEncoderOut * 4 + 512);
  CHECK(head.fwd_peak_saved == kLogits * 2);
}

}  // namespace headroom::planner
