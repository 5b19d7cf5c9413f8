// transformers' enable_input_require_grads makes a frozen input embedding's output a
// leaf that requires grad; its AccumulateGrad node holds it (torch 2.11
// torch/csrc/autograd/functions/accumulate_grad.h, `Variable variable`), which no
// saved-tensor pack hook sees. Where nothing else saves it (BERT: the embeddings' sum
// reads it, no checkpointed layer does), it is transient at the peak
// (planner/mechanisms/input_require_grads.h input_grad_leaves, planner/predict/prediction.cc).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/mechanisms/input_require_grads.h"
#include "planner/predict/model_context.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// The oracle's grid row hf-trainer/bert-base-uncased/lora/bf16/non-reentrant/b32s512.
RunSettings bert_lora_non_reentrant() {
  RunSettings s = hf_bert_base(TrainMode::kLora);
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  return s;
}

TEST_CASE("a frozen embedding's leaf that only its AccumulateGrad keeps is found, a checkpointed layer's input is not") {
  const ModelContext bert = prepared_context(bert_lora_non_reentrant());
  const std::vector<int> leaves = input_grad_leaves(bert.graph);
  REQUIRE(leaves.size() == 1);
  CHECK(bert.graph.tensors[static_cast<size_t>(leaves.front())].name == "bert.embeddings.word_embeddings");
  // A decoder's leaf is layer 0's input: the checkpoint saves it through the pack hook.
  RunSettings qwen = bert_lora_non_reentrant();
  qwen.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2.5-0.5b/config.json";
  qwen.lora.targets = {};
  qwen.train_patterns = {};
  qwen.seq_len = 512;
  const ModelContext decoder = prepared_context(qwen);
  CHECK(input_grad_leaves(decoder.graph).empty());
}

TEST_CASE("BERT's leaf is transient at a peak in a later layer's backward, its bytes unchanged") {
  const Prediction p = predict_as_given(bert_lora_non_reentrant());
  REQUIRE(p.where.phase == "backward");
  const int64_t leaf = int64_t{32} * 512 * 768 * 2;  // the bf16 word embedding output
  // The oracle's record of this row: 636.5 MiB of saved activations, 674.1 MiB transient
  // (the leaf among them as op `embedding`); with the leaf an activation headroom gave
  // 660.4 and 650.1.
  const double mib = 1024.0 * 1024.0;
  CHECK(static_cast<double>(p.peak_as_allocated.activations) / mib == doctest::Approx(636.5).epsilon(0.01));
  CHECK(static_cast<double>(p.peak_as_allocated.transient) / mib == doctest::Approx(674.1).epsilon(0.01));
  CHECK(p.peak_as_allocated.transient > leaf);
}

}  // namespace
}  // namespace headroom::planner
