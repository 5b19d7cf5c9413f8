// torchtune's OffloadActivations keeps the GPU copies of packed tensors in a forward
// stash of five tensor ids, and a non-reentrant checkpoint packs two tensors a block:
// the dummy `_NoopSaveInputs` saves beside the block's input, and the input
// (planner/predict/offload_stash.h). So while a block runs forward the stash holds its
// own input and the two before it, not four.
#include <doctest/doctest.h>

#include <vector>

#include "planner/predict/offload_stash.h"
#include "planner/predict/step_model.h"

namespace headroom::planner {

TEST_CASE("torchtune's stash of five tensor ids holds three checkpointed blocks' inputs") {
  CHECK(stashed_checkpoint_blocks(kCheckpointOffloadStash) == 3);
  CHECK(stashed_checkpoint_blocks(1) == 1);
}

TEST_CASE("with checkpoint inputs offloaded, the head runs forward beside the last two inputs") {
  // Six checkpointed layers whose input is 100 bytes, then a head whose forward peaks at
  // 1000 (the oracle's torchtune[tt]/llama-3.2-1b/lora/b2s2048/offload peaks there).
  StepModel model;
  model.base = 10000;
  model.checkpoint_stash = kCheckpointOffloadStash;
  BlockProfile layer;
  layer.checkpoint = 100;
  layer.fwd_peak_nograd = 100;
  layer.recompute_peak = 100;
  layer.bwd_peak = 100;
  layer.on_autograd = true;
  BlockProfile head;
  head.fwd_peak = 1000;
  head.bwd_peak = 10;
  head.on_autograd = true;
  head.checkpointable = false;
  model.blocks = {layer, layer, layer, layer, layer, layer, head};
  model.grads_bwd.assign(model.blocks.size(), 0);
  model.copy_ms.assign(model.blocks.size(), 0);
  std::vector<BlockChoice> choices(6, BlockChoice::kCheckpoint);
  choices.push_back(BlockChoice::kKeep);
  const StepPeak peak = walk_step(model, choices, 0);
  REQUIRE(peak.phase == "forward");
  REQUIRE(peak.block == 6);
  CHECK(peak.bytes == 10000 + 2 * 100 + 1000);
  CHECK(peak.host_activations == 6 * 100);
}

TEST_CASE("the embedding's backward runs beside layer 0's input brought back from the host") {
  // torchtune 0.6.1 OffloadActivations keeps a tensor it brought back in bwd_tensor_stash
  // until the hook of the next backward node that unpacks one has run: layer 0's input
  // (block 1's) stays through the embedding's backward under full fine-tuning (the oracle's
  // torchtune[tt]/llama-3-8b/full/b2s2048/offload peaks there with it live).
  StepModel model;
  model.base = 10000;
  model.checkpoint_stash = kCheckpointOffloadStash;
  BlockProfile embedding;
  embedding.bwd_peak = 1000;  // the embedding's weight gradient
  embedding.on_autograd = true;
  embedding.checkpointable = false;
  BlockProfile layer;
  layer.checkpoint = 100;
  layer.fwd_peak_nograd = 100;
  layer.recompute_peak = 100;
  layer.bwd_peak = 100;
  layer.on_autograd = true;
  model.blocks = {embedding, layer, layer};
  model.grads_bwd.assign(model.blocks.size(), 0);
  model.copy_ms.assign(model.blocks.size(), 0);
  const std::vector<BlockChoice> choices = {BlockChoice::kKeep, BlockChoice::kCheckpoint, BlockChoice::kCheckpoint};
  const StepPeak peak = walk_step(model, choices, 0);
  REQUIRE(peak.phase == "backward");
  REQUIRE(peak.block == 0);
  CHECK(peak.bytes == 10000 + 1000 + 100);
  CHECK(peak.transient == 1000 + 100);  // saved by nothing
  CHECK(peak.activations == 0);
}

}  // namespace headroom::planner
