// torchtune's RMSNorm by release (docs/stacks.md, "Releases"): from 0.5 F.rms_norm over
// x.float() with the 16-bit scale keeps the normalized tensor, which the scale's
// gradient needs, in fp32; 0.4 cast it back to 16 bits before the scale.
#include <doctest/doctest.h>

#include <string>

#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

const graph::Tensor& normalized(const ModelContext& context) {
  const graph::Tensor* found = context.graph.find_tensor("model.layers.0.input_layernorm:normalized");
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("torchtune 0.5 and later keep RMSNorm's normalized tensor in fp32, 0.4 in bf16, an unknown release as the newer") {
  RunSettings s = torchtune_llama_1b();
  s.mode = TrainMode::kFull;
  CHECK(normalized(prepared_context(s)).dtype == graph::DType::kF32);  // no release: the current, and dearer
  s.versions["torchtune"] = "0.6.1";
  const Prediction newer = predict_as_given(s);
  CHECK(normalized(prepared_context(s)).dtype == graph::DType::kF32);
  s.versions["torchtune"] = "0.4.0";
  CHECK(normalized(prepared_context(s)).dtype != graph::DType::kF32);
  const Prediction older = predict_as_given(s);
  // Without checkpointing each layer keeps two of them (input and post-attention norms):
  // 2 extra bytes an element, B x S x hidden, 16 layers.
  const int64_t per_norm = int64_t{2} * s.micro_batch * s.seq_len * 2048;
  CHECK(newer.allocated.activations - older.allocated.activations == 2 * 16 * per_norm + per_norm);
  // The Trainer's models keep transformers' RMSNorm whatever torchtune's release.
  s.stack = Stack::kHfTrainer;
  s.versions.erase("torchtune");
  CHECK(normalized(prepared_context(s)).dtype != graph::DType::kF32);
}

}  // namespace headroom::planner
