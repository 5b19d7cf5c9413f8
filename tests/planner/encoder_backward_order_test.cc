// What the encoders' backward holds at its last blocks, each in bytes from the library
// code and the meta-device oracle's rows (bench/oracle grid, transformers 5.23.0, torch 2.11):
// - a block ending in dropout uses up its out_grad (BackwardGradients::out_grad_used_up);
// - a gradient waiting across blocks (planner/time/crossing_gradients.h);
// - transformers 5.x's CLIP visual projection inside the vision tower
//   (planner/mechanisms/clip_projection_order.h);
// - a convolution under autocast keeping its weight's 16-bit cast (planner/mechanisms/autocast.cc);
// - Qwen2.5-VL's token lookup before its vision tower (models/qwen2_5_vl.cc).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "planner/time/crossing_gradients.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

std::string hf_config(const std::string& name) {
  return std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/" + name + "/config.json";
}

// CLIP ViT-B/32 fully fine-tuned under the Trainer's bf16 AMP on an H200, B = 32 at
// 224 px, fused AdamW (grid rows hf-trainer/clip-vit-base-patch32/full/bf16-amp/*/32).
RunSettings clip_full_amp(const std::string& transformers) {
  RunSettings s;
  s.model = hf_config("clip-vit-base-patch32");
  s.gpu = "h200";
  s.precision = Precision::kBf16Amp;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kFull;
  s.micro_batch = 32;
  s.resolution = 224;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", transformers}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  return s;
}

int64_t tensor_bytes_named(const ModelContext& context, const std::string& name, int64_t batch) {
  const int t = graph::tensor_index(context.graph, name);
  REQUIRE(t >= 0);
  return graph::tensor_bytes(context.graph.tensors[static_cast<size_t>(t)], context.compute_dtype, batch,
                             context.seq_len);
}

TEST_CASE("BERT's embeddings end in dropout whose backward uses up the arriving gradient") {
  RunSettings s = hf_bert_base(TrainMode::kFull);
  s.micro_batch = 8;
  s.seq_len = 128;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  const Prediction p = predict_as_given(s);
  // The oracle (hf-trainer/bert-base-uncased/full/bf16/non-reentrant/b8s128): 877,476,740
  // bytes at the word embedding's embedding_dense_backward, 1,576,976 of them transient,
  // the bf16 [8, 128, 768] gradient the embeddings' LayerNorm backward handed on (its
  // _to_copy) and a few scalars. Layer 0's fp32 [8, 128, 768] gradient went as the
  // dropout's backward returned; held through the block it made 4,718,592.
  CHECK(p.where.block_name == "embeddings");
  CHECK(p.where.phase == "backward");
  CHECK(p.peak_as_allocated.transient == 8 * 128 * 768 * 2);
  CHECK(std::abs(static_cast<double>(p.peak_allocated - p.peak.workspaces) - 877476740.0) < 877476740.0 * 0.001);
}

TEST_CASE("T5's encoder output gradient waits through the decoder embeddings' backward") {
  RunSettings s;
  s.model = hf_config("flan-t5-xl-2l");
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kFull;
  s.micro_batch = 4;
  s.seq_len = 512;
  s.target_tokens = 128;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  const ModelContext context = prepared_context(s);
  std::vector<int64_t> bytes(context.graph.tensors.size());
  for (size_t t = 0; t < bytes.size(); ++t) {
    bytes[t] = graph::tensor_bytes(context.graph.tensors[t], context.compute_dtype, 4, context.seq_len);
  }
  const std::vector<int64_t> crossing = crossing_gradients(context.graph, context.analysis, bytes);
  // encoder.dropout's [4, 512, 2048] bf16 output, which both decoder layers' cross-attention
  // reads: its gradient waits from decoder.block.1's backward to encoder.final's.
  CHECK(crossing[static_cast<size_t>(block_ending(context.graph, "decoder.embed"))] == 4 * 512 * 2048 * 2);
  CHECK(crossing[static_cast<size_t>(block_ending(context.graph, "decoder.block.0"))] == 4 * 512 * 2048 * 2);
  CHECK(crossing[static_cast<size_t>(block_ending(context.graph, "encoder.block.1"))] == 0);
  CHECK(crossing[static_cast<size_t>(block_ending(context.graph, "decoder.block.1"))] == 0);
  // The oracle (hf-trainer/flan-t5-xl-2l/full/bf16/none/s512t128/t5): 403,177,488 transient
  // at the shared embedding's sum in decoder.embed's backward, the encoder output's
  // gradient (an `add`, 8 MiB) among them; without it 396,886,016 (-1.6%).
  const Prediction p = predict_as_given(s);
  CHECK(p.where.block_name == "decoder.embed");
  CHECK(std::abs(static_cast<double>(p.peak_as_allocated.transient) - 403177488.0) < 403177488.0 * 0.01);
}

TEST_CASE("Qwen2.5-VL looks its tokens up before the vision tower and runs that backward last") {
  // Qwen2_5_VLModel.forward (modeling_qwen2_5_vl.py 5.23.0) embeds input_ids before
  // get_image_features, so the lookup's backward runs after the whole tower's, and the
  // gradient masked_scatter's backward gives inputs_embeds waits through it.
  RunSettings s;
  s.model = hf_config("qwen2.5-vl-7b-2l");
  s.gpu = "h200";
  s.precision = Precision::kBf16Amp;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kFull;
  s.resolution = 896;
  s.seq_len = 2048;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  const ModelContext context = prepared_context(s);
  CHECK(context.graph.blocks.front().name == "embeddings");
  // The oracle (hf-trainer/qwen2.5-vl-7b-2l/full/non-reentrant/qwen2.5-vl-amp): 26,944,700,912
  // bytes at the fp32 embedding's embedding_dense_backward, every gradient made and
  // 29,360,812 transient, inputs_embeds' fp32 [1, 2048, 3584] gradient (a masked_fill)
  // among them. With the lookup after the tower headroom peaked in vision block 0's
  // backward at 27,284,720,640 (+1.1%), 379,891,712 of it transient.
  const Prediction p = predict_as_given(s);
  CHECK(p.where.block_name == "embeddings");
  CHECK(p.where.phase == "backward");
  CHECK(p.peak_as_allocated.transient == 2048 * 3584 * 4);
  const double oracle = 26944700912.0;
  CHECK(std::abs(static_cast<double>(p.peak_allocated - p.peak.workspaces) - oracle) < oracle * 0.001);
}

TEST_CASE("transformers 5.x projects CLIP's image inside the vision tower") {
  const ModelContext v5 = prepared_context(clip_full_amp("5.23.0"));
  const ModelContext v4 = prepared_context(clip_full_amp("4.44.2"));
  const auto block_of = [](const ModelContext& c) {
    const graph::Node* node = c.graph.find_node("visual_projection");
    REQUIRE(node != nullptr);
    return c.graph.blocks[static_cast<size_t>(node->block)].name;
  };
  CHECK(block_of(v5) == "vision_head");
  CHECK(block_of(v4) == "head");
  // headroom's own executor (the unspecified stack, models/torch/clip_module.cc) projects
  // both towers in its head: its ZeRO-3 gathers follow the graph's blocks, and a projection
  // moved out of the head was used ungathered (executor/torch/data_parallel_test).
  RunSettings own = clip_full_amp("5.23.0");
  own.stack = Stack::kUnspecified;
  own.versions.clear();
  CHECK(block_of(prepared_context(own)) == "head");
  // The oracle (hf-trainer/clip-vit-base-patch32/full/bf16-amp/none/32), at the peak in
  // text layer 11's backward: 5,249,028 bytes of gradients (text_projection's fp32
  // [512, 512] and the text layer's own, no visual_projection's [512, 768]: +1,572,864 when
  // both projections ran after the text tower) and the projected image embeddings'
  // gradient, a bf16 [32, 512] `add`, waiting.
  const Prediction p = predict_as_given(clip_full_amp("5.23.0"));
  CHECK(p.where.block_name == "text_model.encoder.layers.11");
  CHECK(std::abs(p.peak_as_allocated.gradients - 5249028) < 1024);
  CHECK(std::abs(p.peak_as_allocated.transient - 35356684) < 1024);
}

TEST_CASE("A convolution under autocast keeps its weight's 16-bit cast though its input needs no grad") {
  RunSettings s = clip_full_amp("5.23.0");
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  const ModelContext context = prepared_context(s);
  const std::string conv = "vision_model.embeddings.patch_embedding";
  const graph::Node* node = context.graph.find_node(conv);
  REQUIRE(node != nullptr);
  CHECK(saves(*node, conv + ".weight_cast"));
  const int n = static_cast<int>(node - context.graph.nodes.data());
  const int cast = graph::tensor_index(context.graph, conv + ".weight_cast");
  const std::vector<int>& active = context.analysis.node_saves[static_cast<size_t>(n)];
  CHECK(std::find(active.begin(), active.end(), cast) != active.end());
  CHECK(tensor_bytes_named(context, conv + ".weight_cast", 32) == 768 * 3 * 32 * 32 * 2);
  // The oracle (hf-trainer/clip-vit-base-patch32/full/bf16-amp/non-reentrant/32): 43,503,608
  // bytes of activations at vision layer 0's backward, the [768, 3, 32, 32] bf16 `_to_copy`
  // among them; without it headroom had 39,355,904 (-9.5%).
  const Prediction p = predict_as_given(s);
  CHECK(p.where.block_name == "vision_model.encoder.layers.0");
  CHECK(std::abs(static_cast<double>(p.peak_as_allocated.activations) - 43503608.0) < 43503608.0 * 0.03);
}

}  // namespace
}  // namespace headroom::planner
