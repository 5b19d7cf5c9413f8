// What a model's forward keeps in its frame until it returns: ViTModel.forward rebinds
// pixel_values to its copy in the patch projection's dtype
// (`pixel_values.to(expected_dtype)`, transformers 5.23.0 modeling_vit.py) and holds it
// until it returns after its final LayerNorm. models/vision.cc holds the input;
// planner/mechanisms/autocast.cc turns that into the 16-bit copy over a 16-bit model;
// graph/graph_analysis.cc (held_in_forward), BlockProfile::forward_frame and walk_step
// price it in forward only: over the blocks before the holder's, then in the holder's
// block until the holding node has run (block_profile.cc held_in_forward_until), not
// through the classifier and loss the task model runs after ViTModel.forward returns.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/mechanisms/autocast.h"
#include "planner/predict/step_model.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

int index_of_tensor(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    if (graph.tensors[t].name == name) return static_cast<int>(t);
  }
  FAIL("no tensor " << name);
  return -1;
}

const graph::Node& node_named(const graph::LayerGraph& graph, const std::string& name) {
  const auto it = std::find_if(graph.nodes.begin(), graph.nodes.end(), [&](const graph::Node& n) { return n.name == name; });
  REQUIRE_MESSAGE(it != graph.nodes.end(), name);
  return *it;
}

TEST_CASE("ViTModel holds its bf16 copy of pixel_values until it returns, not into backward") {
  RunSettings settings = hf_vit_b16(TrainMode::kLora);
  const ModelContext context = prepared_context(settings);
  const std::string copy = "vit.embeddings.patch_embeddings.projection.cast:pixel_values";
  const graph::Node& layernorm = node_named(context.graph, "vit.layernorm");
  CHECK(std::count(layernorm.holds.begin(), layernorm.holds.end(), copy) == 1);
  CHECK(std::count(layernorm.holds.begin(), layernorm.holds.end(), "pixel_values") == 0);
  const int t = index_of_tensor(context.graph, copy);
  CHECK(context.analysis.held_in_forward[t]);
  CHECK_FALSE(context.analysis.persistent[t]);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 32, context.seq_len,
                                           Accounting::kAllocated, context.gpu);
  // bf16 pixel_values, as the graph sizes them: B * 197 rows of 3 * 16 * 16 pixels (one
  // row more than the 196 patches, models/vit.cc), about [32, 3, 224, 224].
  const int64_t copy_bytes = int64_t{32} * 197 * 768 * 2;
  CHECK(profile.blocks[0].forward_frame == copy_bytes);
  // ViTModel.forward's embedding_output too, held by the same frame, read by layer 0 and,
  // under autocast, saved by no node (layernorm_before keeps its fp32 cast): layer 0's frame.
  const int layer0 = block_ending(context.graph, ".layer.0");
  const int64_t embedding_bytes = int64_t{32} * 197 * 768 * 2;
  CHECK(profile.blocks[layer0].forward_frame == embedding_bytes);
  // Both leave the frame after the last layer: the head's block holds them as it starts,
  // until vit.layernorm (ViTModel.forward's last op) has run.
  const int last_layer = node_named(context.graph, "vit.layernorm").block - 1;
  CHECK(profile.blocks[last_layer].forward_frame == -(copy_bytes + embedding_bytes));
  for (size_t b = 1; b < profile.blocks.size(); ++b) {
    if (static_cast<int>(b) != layer0 && static_cast<int>(b) != last_layer) CHECK(profile.blocks[b].forward_frame == 0);
  }
  // Full fine-tune: the projection saves that copy for its weight gradient, so it is
  // an activation already, not held again.
  const ModelContext full = prepared_context(hf_vit_b16(TrainMode::kFull));
  CHECK(profile_step(full.graph, full.analysis, full.compute_dtype, 32, full.seq_len, Accounting::kAllocated, full.gpu)
            .blocks[0]
            .forward_frame == 0);
  // An fp32 model under autocast: ViTModel's .to is a no-op, autocast's cast a transient.
  settings.precision = Precision::kBf16Mixed;
  const ModelContext mixed = prepared_context(settings);
  CHECK(std::count(node_named(mixed.graph, "vit.layernorm").holds.begin(),
                   node_named(mixed.graph, "vit.layernorm").holds.end(), copy) == 0);
}

TEST_CASE("what the forward's frame holds is transient in every later forward block and gone in backward") {
  StepModel model;
  model.base = 1000;
  model.grads_bwd = {0, 0};
  BlockProfile block;
  block.keep = 100;
  block.fwd_peak = 100;
  block.fwd_peak_saved = 100;
  block.bwd_peak = 100;
  block.bwd_peak_saved = 100;
  block.on_autograd = true;
  model.blocks = {block, block};
  model.copy_ms = {0, 0};
  const std::vector<BlockChoice> keep = {BlockChoice::kKeep, BlockChoice::kKeep};
  const StepPeak without = walk_step(model, keep, 0);
  model.blocks[0].forward_frame = 500;
  const StepPeak with = walk_step(model, keep, 0);
  REQUIRE(with.phase == "forward");
  REQUIRE(with.block == 1);
  CHECK(with.bytes == 1000 + 100 + 500 + 100);
  CHECK(with.transient == 500);
  CHECK(with.activations == 100 + 100);
  CHECK(without.bytes == 1000 + 100 + 100);  // backward: the same without the frame
}

// BERT-base under the Trainer's AMP (bf16 over fp32 weights), fully fine-tuned, B = 32,
// S = 512, transformers 5.23.0 (grid rows hf-trainer/bert-base-uncased/full/bf16-amp/*).
RunSettings hf_bert_amp_full() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/bert-base-uncased/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Amp;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kFull;
  s.micro_batch = 32;
  s.seq_len = 512;
  s.versions["transformers"] = "5.23.0";
  return s;
}

bool holds(const graph::Node& node, const std::string& tensor) {
  return std::count(node.holds.begin(), node.holds.end(), tensor) == 1;
}

// BertEncoder's loop holds each layer's input until the layer returns, and BertSelfOutput
// and BertOutput their dropout's output through the LayerNorm (modeling_bert.py 5.23.0).
TEST_CASE("BertLayer's frames hold its input and each dropout output through its LayerNorms") {
  const ModelContext context = prepared_context(hf_bert_amp_full());
  const std::string p = "bert.encoder.layer.3";
  CHECK(holds(node_named(context.graph, p + ".output.LayerNorm"), "bert.encoder.layer.2.output.LayerNorm"));
  CHECK(holds(node_named(context.graph, p + ".output.LayerNorm"), p + ".output.dropout"));
  CHECK(holds(node_named(context.graph, p + ".attention.output.LayerNorm"), p + ".attention.output.dropout"));
}

// BertModel.forward keeps `embedding_output` in its frame through the encoder and the
// pooler (modeling_bert.py 5.23.0). Under AMP it is the embeddings' fp32 dropout output,
// which layer 0's linears keep only as 16-bit casts: held until BertModel.forward
// returns after its pooler, no activation, priced from layer 0 (the last block to read
// it) to the last layer, then in the head until the pooler has run, in forward only.
TEST_CASE("BertModel holds its fp32 embedding_output to the pooler, transient in every layer's forward") {
  const ModelContext context = prepared_context(hf_bert_amp_full());
  const std::string embedding_output = "bert.embeddings.dropout";
  CHECK(holds(node_named(context.graph, "bert.pooler.activation"), embedding_output));
  const int t = index_of_tensor(context.graph, embedding_output);
  CHECK(context.analysis.held_in_forward[t]);
  CHECK_FALSE(context.analysis.persistent[t]);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 32, 512,
                                           Accounting::kAllocated, context.gpu);
  const int layer0 = block_ending(context.graph, ".layer.0");
  // Beside it each block's forward frame counts autocast's cached casts of its trainable
  // biases (autocast_cached_bias_elements, tests/planner/autocast_bias_cache_test.cc).
  std::vector<int64_t> bias_casts(profile.blocks.size(), 0);
  for (const graph::Node& node : context.graph.nodes) {
    bias_casts[static_cast<size_t>(node.block)] +=
        account(graph::dtype_bytes(context.compute_dtype, autocast_cached_bias_elements(node)), Accounting::kAllocated);
  }
  CHECK(bias_casts[static_cast<size_t>(layer0)] == (5 * 768 + 3072) * 2);
  const int64_t embedding_bytes = int64_t{32} * 512 * 768 * 4;
  CHECK(profile.blocks[layer0].forward_frame == embedding_bytes + bias_casts[static_cast<size_t>(layer0)]);
  const int last_layer = node_named(context.graph, "bert.pooler.activation").block - 1;
  CHECK(profile.blocks[last_layer].forward_frame == -embedding_bytes + bias_casts[static_cast<size_t>(last_layer)]);
  for (size_t b = 0; b < profile.blocks.size(); ++b) {
    if (static_cast<int>(b) != layer0 && static_cast<int>(b) != last_layer) {
      CHECK(profile.blocks[b].forward_frame == bias_casts[b]);
    }
  }
  // RobertaModel has no pooler in its classification model: the encoder's end holds it.
  RunSettings roberta = hf_bert_amp_full();
  roberta.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/roberta-base/config.json";
  const ModelContext roberta_context = prepared_context(roberta);
  CHECK(holds(node_named(roberta_context.graph, "roberta.encoder.layer.11.output.LayerNorm"),
              "roberta.embeddings.dropout"));
}

// In fp32 without autocast, LoRA with no dropout (PEFT's nn.Identity), layer 0's lora_A
// keeps the embeddings' output itself: that save holds it through layer 0's backward,
// past the frame's end, so BertModel's hold adds nothing (headroom's executor, which
// holds no frame, measured tiny-bert LoRA at ZeRO-3 one copy under a whole-step price).
TEST_CASE("a frame's hold on a tensor a later block saves changes nothing, the save outlives the frame") {
  RunSettings settings = hf_bert_amp_full();
  settings.precision = Precision::kFp32;
  settings.mode = TrainMode::kLora;
  settings.lora.dropout = 0;
  const ModelContext context = prepared_context(settings);
  const std::string embedding_output = "bert.embeddings.dropout";
  REQUIRE(holds(node_named(context.graph, "bert.pooler.activation"), embedding_output));
  const int t = index_of_tensor(context.graph, embedding_output);
  bool saved = false;
  for (const std::vector<int>& saves : context.analysis.node_saves) {
    saved = saved || std::count(saves.begin(), saves.end(), t) > 0;
  }
  REQUIRE(saved);
  CHECK_FALSE(context.analysis.persistent[t]);
  CHECK_FALSE(context.analysis.held_in_forward[t]);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 32, 512,
                                           Accounting::kAllocated, context.gpu);
  for (const BlockProfile& block : profile.blocks) CHECK(block.forward_frame == 0);
}


// Llama 3.2 1B (its config.json) with LoRA on q_proj and v_proj in pure bf16, B = 2,
// S = 512, under `stack`.
RunSettings llama_1b_lora(Stack stack) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = stack;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 2;
  s.seq_len = 512;
  s.versions["transformers"] = "5.23.0";
  return s;
}

// LlamaModel.forward binds inputs_embeds and holds it until it returns after self.norm
// (transformers 5.23.0 modeling_llama.py; models/llama.cc). Under LoRA no node saves it
// (layer 0's input_layernorm keeps its fp32 copy): a frame from layer 0, its last
// reader, over every layer, then the head's entry until model.norm has run.
TEST_CASE("LlamaModel holds inputs_embeds to its final norm, a frame over every layer") {
  const ModelContext context = prepared_context(llama_1b_lora(Stack::kHfTrainer));
  REQUIRE(holds(node_named(context.graph, "model.norm"), "model.embed_tokens"));
  const int t = index_of_tensor(context.graph, "model.embed_tokens");
  CHECK(context.analysis.held_in_forward[t]);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 2, 512,
                                           Accounting::kAllocated, context.gpu);
  const int64_t embeds = int64_t{2} * 512 * 2048 * 2;
  const int layer0 = block_ending(context.graph, ".layers.0");
  const int last_layer = node_named(context.graph, "model.norm").block - 1;
  CHECK(last_layer == block_ending(context.graph, ".layers.15"));
  CHECK(profile.blocks[layer0].forward_frame == embeds);
  CHECK(profile.blocks[last_layer].forward_frame == -embeds);
  // torchtune's TransformerDecoder and litgpt's GPT rebind one name through the layers:
  // no hold (planner/mechanisms/embedding_hold.h).
  for (const Stack own : {Stack::kTorchtune, Stack::kLitgpt}) {
    const ModelContext rebinds = prepared_context(llama_1b_lora(own));
    CHECK_FALSE(holds(node_named(rebinds.graph, "model.norm"), "model.embed_tokens"));
  }
}

}  // namespace
}  // namespace headroom::planner
