// What the meta-device oracle (bench/oracle, recorded grid) measures where the
// walk's backward used to hold a block's saved tensors to the block's end:
// autograd releases a node's saved tensors once it has run (torch engine.cpp
// release_variables), gradients wait between a tensor's consumers and its
// producer inside a block (planner/time/backward_gradients.h), torchtune's recipe
// holds the model's 16-bit logit chunks while its chunked loss runs, and the
// frames of transformers' ViT hold module arguments (models/vision.cc).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

double error_against(const Prediction& p, int64_t oracle_bytes) {
  const double predicted = static_cast<double>(p.peak_allocated - p.peak.workspaces);
  return (predicted - static_cast<double>(oracle_bytes)) / static_cast<double>(oracle_bytes);
}

TEST_CASE("torchtune Llama 3.2 1B full at 2 x 2048: the peak is the chunked loss's forward, as the oracle's") {
  RunSettings s = torchtune_llama_1b();
  s.gpu = "h200";
  s.seq_len = 2048;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions["torchtune"] = "0.6.1";
  const Prediction p = predict_as_given(s);
  // The oracle (env tt, torchtune 0.6.1): 11,215,565,604 bytes, while the last chunk's
  // cross-entropy runs forward; the walk had +2.2% at the head's backward.
  MESSAGE("error " << 100 * error_against(p, 11215565604) << "% at " << p.where.phase << " " << p.where.block_name);
  CHECK(std::abs(error_against(p, 11215565604)) < 0.01);
  CHECK(p.where.phase == "forward");
  CHECK(p.where.block_name == "head");
}

RunSettings vit_lora_128(Precision precision, CheckpointPolicy checkpointing) {
  RunSettings s = hf_vit_b16(TrainMode::kLora);
  s.precision = precision;
  s.lora.targets = {"query", "value"};
  s.lora.dropout = 0.05;
  s.train_patterns = {"classifier"};
  s.micro_batch = 128;
  s.checkpointing = checkpointing;
  s.optimizer_impl = OptimizerImpl::kFused;
  return s;
}

TEST_CASE("ViT-B/16 LoRA at 128 images: the frames' held arguments, as the oracle measures") {
  // The oracle (env hf5): 1,661,118,976 bytes with non-reentrant checkpointing (the walk
  // had -2.4% without the held layernorm_after output and embedding_output).
  const Prediction kept = predict_as_given(vit_lora_128(Precision::kBf16Pure, CheckpointPolicy::kEveryBlock));
  MESSAGE("non-reentrant: error " << 100 * error_against(kept, 1661118976) << "%");
  CHECK(std::abs(error_against(kept, 1661118976)) < 0.01);
  // Reentrant under AMP: a no_grad forward of every layer, whose peak is the held
  // arguments beside the MLP's (1,055,817,356 bytes; -7.7% without them).
  RunSettings reentrant = vit_lora_128(Precision::kBf16Amp, CheckpointPolicy::kEveryBlock);
  reentrant.recompute = Recompute::kBlockReentrant;
  const Prediction nograd = predict_as_given(reentrant);
  MESSAGE("reentrant AMP: error " << 100 * error_against(nograd, 1055817356) << "%");
  CHECK(std::abs(error_against(nograd, 1055817356)) < 0.02);
}

TEST_CASE("the embedding's backward holds one gradient of its output, the sum its readers sent") {
  // Llama 3.2 1B in full at 1 x 512 peaks at the embedding's backward. The oracle (env hf5):
  // 10,937,197,400 bytes, with one 2 MiB gradient of the embedding's output in flight; the
  // walk priced it twice, as the block's out_grad and again as the node's output gradient.
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kFull;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.versions["transformers"] = "5.23.0";
  const ModelContext context = prepared_context(s);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 1, 512,
                                           Accounting::kAllocated, context.gpu);
  const BlockProfile& embeddings = profile.blocks[0];
  CHECK(embeddings.out_grad == 512 * 2048 * 2);
  // beside it the tied weight's partial gradient and the new sum (partial_gradients)
  const int64_t tied = int64_t{128256} * 2048 * 2;
  CHECK(embeddings.bwd_peak == embeddings.keep + embeddings.out_grad + 2 * tied);
  const Prediction p = predict_as_given(s);
  REQUIRE(p.where.block == 0);
  MESSAGE("error " << 100 * error_against(p, 10937197400) << "%");  // +0.04% with the double count
  CHECK(std::abs(error_against(p, 10937197400)) < 0.0003);
}

}  // namespace
}  // namespace headroom::planner
