// A post-norm block's residual gradient waits through the branch's backward. BERT's
// layer ends dense, dropout, add (the residual), LayerNorm: the add passes its output
// gradient on as is (torch 2.11 tools/autograd/derivatives.yaml, add.Tensor), and that gradient is LayerNorm
// backward's fresh tensor, not the block's arriving out_grad, so it stays live as the
// residual's gradient until the MLP's backward reaches the residual's producer
// (BackwardGradients::passes_out_grad; docs/memory-model.md, "Per-block terms").
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

TEST_CASE("BERT full reentrant at 32 x 512 holds the residual's gradient through its MLP's backward") {
  RunSettings s = hf_bert_base(TrainMode::kFull);
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlockReentrant;
  s.optimizer_impl = OptimizerImpl::kFused;
  const Prediction p = predict_as_given(s);
  // The oracle (bench/oracle grid, hf-trainer/bert-base-uncased/full/bf16/reentrant/b32s512):
  // 2,023,227,996 bytes in bert.encoder.layer.11's backward, 276,828,176 of them
  // transient, among them LayerNorm backward's fp32 [32, 512, 768] gradient of the
  // residual (48 MiB) beside the output dense's input gradient. Without it headroom
  // had 226,492,416 transient.
  CHECK(p.where.block_name == "bert.encoder.layer.11");
  CHECK(p.where.phase == "backward");
  MESSAGE("transient at the peak " << p.peak_as_allocated.transient << " B, peak " << p.peak_allocated << " B");
  CHECK(std::abs(p.peak_as_allocated.transient - 276828176) <= 276828176 * 3 / 100);
  CHECK(std::abs(static_cast<double>(p.peak_allocated - p.peak.workspaces) - 2023227996.0) < 2023227996.0 * 0.02);
}

}  // namespace
}  // namespace headroom::planner
