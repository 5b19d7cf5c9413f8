// The peak is the first moment the most bytes are live: a later backward node that
// reaches the same bytes does not move it (bench/oracle/meta_recorder.py note_peak takes
// a peak only where live bytes exceed it), so the categories at the peak are the first
// node's (planner/time/backward_gradients.cc keep_outgrowing).
#include <doctest/doctest.h>

#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

TEST_CASE("ViT full reentrant at 32: layer 0 peaks at its output dense's backward, the GELU output still saved") {
  RunSettings s = hf_vit_b16(TrainMode::kFull);
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlockReentrant;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  const Prediction p = predict_as_given(s);
  REQUIRE(p.where.phase == "backward");
  // The oracle's record of hf-trainer/vit-base-patch16-224/full/bf16/reentrant/32: 221.9 MiB
  // of activations (the pixels among them), 55.4 MiB transient; at GELU's backward, the same
  // bytes, headroom gave 185.1 and 92.3 (the saved GELU output released, its gradient beside).
  const double mib = 1024.0 * 1024.0;
  CHECK(static_cast<double>(p.peak_as_allocated.activations) / mib == doctest::Approx(221.9).epsilon(0.01));
  CHECK(static_cast<double>(p.peak_as_allocated.transient) / mib == doctest::Approx(55.4).epsilon(0.01));
}

}  // namespace
}  // namespace headroom::planner
