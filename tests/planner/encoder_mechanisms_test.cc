// What the encoders' training stacks keep beyond their layers' own saves, each
// held in bytes computed from the library code (the meta-device oracle's encoder
// runs, bench/oracle README, "What the encoder runs hold"):
// - transformers 5.x's enable_input_require_grads under LoRA with checkpointing
//   (planner/mechanisms/input_require_grads.h; docs/stacks.md);
// - BertOutput holding the GELU output through its LayerNorm (graph::Node::holds);
// - the image processor's fp32 pixel_values (models/vision.h VisionSpec::fp32_pixels);
// - transformers 5.x's ViT module names as LoRA targets (trainability.cc);
// - Flux's strided attention-output slices at batch >= 2 (planner/mechanisms/strided_slices.h);
// - what Flux's single-stream block binds until it returns (graph::Node::holds).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "graph/graph_analysis.h"
#include "models/zoo.h"
#include "planner/mechanisms/strided_slices.h"
#include "planner/predict/model_context.h"
#include "planner/predict/training_notes.h"
#include "planner/settings/hardware.h"
#include "planner/settings/stack.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

std::string hf_model(const std::string& name) {
  return std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/" + name + "/config.json";
}

// BERT-base (h 768, ffn 3072, 12 layers, dropout 0.1) under the Trainer's bf16 with
// LoRA on query and value, every layer checkpointed, B = 8, S = 128.
RunSettings bert_lora_checkpointed() {
  RunSettings s;
  s.model = hf_model("bert-base-uncased");
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"query", "value"};
  s.train_patterns = {"classifier"};
  s.micro_batch = 8;
  s.seq_len = 128;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.versions["transformers"] = "5.23.0";
  return s;
}

StepProfile profile_of(const ModelContext& context, int64_t batch, int64_t seq) {
  return profile_step(context.graph, context.analysis, context.compute_dtype, batch, seq, Accounting::kAllocated,
                      context.gpu);
}

const graph::Tensor& tensor_named(const graph::LayerGraph& graph, const std::string& name) {
  const graph::Tensor* tensor = graph.find_tensor(name);
  REQUIRE(tensor != nullptr);
  return *tensor;
}

TEST_CASE("transformers 5.x: a frozen BERT's embeddings record their graph under LoRA with checkpointing") {
  RunSettings without = bert_lora_checkpointed();
  without.input_require_grads = false;
  CHECK(resolve_stack(bert_lora_checkpointed()).top.input_require_grads);
  RunSettings before_5 = bert_lora_checkpointed();
  before_5.versions["transformers"] = "4.44.2";
  CHECK_FALSE(resolve_stack(before_5).top.input_require_grads);
  RunSettings full = bert_lora_checkpointed();
  full.mode = TrainMode::kFull;
  // 5.23.0 calls it whatever trains; a trained embedding's output is no leaf and is
  // left alone (apply_input_require_grads), a frozen one's is hooked.
  CHECK(resolve_stack(full).top.input_require_grads);

  const Result<ModelContext> on = prepare_context(bert_lora_checkpointed());
  const Result<ModelContext> off = prepare_context(without);
  REQUIRE(on.is_ok());
  REQUIRE(off.is_ok());
  CHECK(tensor_named(on->graph, "bert.embeddings.word_embeddings").requires_grad);
  const int64_t tokens = 8 * 128;
  const int64_t h = 768;
  const StepProfile with_hook = profile_of(on.value(), 8, 128);
  const StepProfile no_hook = profile_of(off.value(), 8, 128);
  CHECK(no_hook.blocks[0].keep == 0);  // frozen, nothing requires grad: no graph
  // The leaf (bf16, held by AccumulateGrad), LayerNorm's fp32 autocast copy of the
  // sum with its fp32 mean and rstd and its weight and bias cast to fp32 (the
  // autocast fp32 list; native_layer_norm keeps input, mean, rstd, weight, bias),
  // and the embeddings' dropout mask (bool).
  const int64_t expected = tokens * h * 2 + tokens * h * 4 + tokens * 2 * 4 + 2 * h * 4 + tokens * h * 1;
  CHECK(with_hook.blocks[0].keep == expected);
}

TEST_CASE("CLIPModel: the hook goes on both towers' input embeddings") {
  RunSettings s;
  s.model = hf_model("clip-vit-base-patch32");
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 4;
  s.resolution = 224;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.versions["transformers"] = "5.23.0";
  const Result<ModelContext> context = prepare_context(s);
  REQUIRE(context.is_ok());
  // CLIPModel.get_input_embeddings: text_model.embeddings.token_embedding; its
  // CLIPVisionModel's: vision_model.embeddings.patch_embedding (_input_embed_layer).
  CHECK(tensor_named(context->graph, "text_model.embeddings.token_embedding").requires_grad);
  CHECK(tensor_named(context->graph, "vision_model.embeddings.patch_embedding").requires_grad);
  const StepProfile profile = profile_of(context.value(), 4, context->seq_len);
  // The text embeddings' sum keeps nothing: the block keeps only the leaf, 77 tokens
  // of 512 in bf16 per sample.
  CHECK(profile.blocks[block_ending(context->graph, "text_embeddings")].keep == 4 * 77 * 512 * 2);
}

TEST_CASE("BertOutput holds the GELU output through its LayerNorm") {
  const Result<ModelContext> context = prepare_context(bert_lora_checkpointed());
  REQUIRE(context.is_ok());
  const graph::Node* norm = context->graph.find_node("bert.encoder.layer.3.output.LayerNorm");
  REQUIRE(norm != nullptr);
  // feed_forward_chunk's two arguments: the GELU output and attention_output (then
  // BertOutput's dropout output and the encoder loop's layer input:
  // forward_frame_test.cc).
  REQUIRE(norm->holds.size() == 4);
  const auto producer = [&](const std::string& tensor) {
    return context->graph.nodes[static_cast<size_t>(context->graph.producer_of(tensor))].name;
  };
  CHECK(producer(norm->holds[0]) == "bert.encoder.layer.3.intermediate.intermediate_act_fn");
  CHECK(producer(norm->holds[1]) == "bert.encoder.layer.3.attention.output.LayerNorm");
  // Without the holds, the recompute of a layer (its dense frozen: nothing keeps the
  // GELU output) lets it go at output.dense; with them, it is live at the LayerNorm,
  // beside attention_output (fp32 under autocast).
  graph::LayerGraph released = context->graph;
  for (graph::Node& node : released.nodes) node.holds.clear();
  const graph::GraphAnalysis released_analysis = graph::analyze_graph(released);
  const StepProfile held = profile_of(context.value(), 8, 128);
  const StepProfile let_go = profile_step(released, released_analysis, context->compute_dtype, 8, 128,
                                          Accounting::kAllocated, context->gpu);
  const int block = block_ending(context->graph, ".layer.3");
  CHECK(held.blocks[block].recompute_peak > let_go.blocks[block].recompute_peak);
  CHECK(held.blocks[block].recompute_peak - let_go.blocks[block].recompute_peak <= 8 * 128 * (3072 * 2 + 768 * 4));
  CHECK(held.blocks[block].keep == let_go.blocks[block].keep);  // a hold saves nothing
}

TEST_CASE("HF image models take fp32 pixel_values, and the patch conv keeps its bf16 copy") {
  const Result<ModelContext> context = prepare_context(hf_vit_b16(TrainMode::kFull));
  REQUIRE(context.is_ok());
  CHECK(tensor_named(context->graph, "pixel_values").dtype == graph::DType::kF32);
  const StepProfile profile = profile_of(context.value(), 32, context->seq_len);
  // 32 images of 3 x 224 x 224 in fp32 (sized per token row: B·S·3·16·16, one row
  // over for the class token, docs/models.md), persistent through the step.
  const int64_t pixels = 32 * context->seq_len * 3 * 16 * 16;
  CHECK(profile.persistent >= pixels * 4);
  const graph::Node* conv = context->graph.find_node("vit.embeddings.patch_embeddings.projection");
  REQUIRE(conv != nullptr);
  const std::string copy = conv->saves.front().tensor;
  CHECK(copy != "pixel_values");
  CHECK(tensor_named(context->graph, copy).dtype.value_or(graph::DType::kBF16) == graph::DType::kBF16);
}

TEST_CASE("a ViT's adapters under reentrant checkpointing: the answer says they would get no gradient") {
  RunSettings s = hf_vit_b16(TrainMode::kLora);
  s.lora.targets = {"query", "value"};
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  const Result<ModelContext> vit = prepare_context(s);
  REQUIRE(vit.is_ok());
  const std::vector<std::string> notes = reentrant_checkpointing_notes(vit->graph, s);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("use_reentrant") != std::string::npos);
  s.checkpointing = CheckpointPolicy::kNone;
  CHECK(reentrant_checkpointing_notes(vit->graph, s).empty());
  // BERT's main input is input_ids: the Trainer's hook makes its layers' inputs require grad.
  const Result<ModelContext> bert = prepare_context(bert_lora_checkpointed());
  REQUIRE(bert.is_ok());
  CHECK(reentrant_checkpointing_notes(bert->graph, bert_lora_checkpointed()).empty());
  // transformers 4.x adds no hook for a PeftModel, BERT's included.
  RunSettings before_5 = bert_lora_checkpointed();
  before_5.versions["transformers"] = "4.44.2";
  CHECK(reentrant_checkpointing_notes(bert->graph, before_5).size() == 1);
}

TEST_CASE("transformers 5.x ViT names select the same LoRA targets as 4.x's") {
  RunSettings renamed = hf_vit_b16(TrainMode::kLora);
  renamed.lora.targets = {"q_proj", "v_proj"};
  RunSettings old_names = hf_vit_b16(TrainMode::kLora);
  old_names.lora.targets = {"query", "value"};
  const Result<ModelContext> a = prepare_context(renamed);
  const Result<ModelContext> b = prepare_context(old_names);
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  // 12 layers x 2 linears x (r·768 + 768·r), r = 16.
  CHECK(a->graph.trainable_parameter_count() == b->graph.trainable_parameter_count());
  CHECK(a->graph.trainable_parameter_count() == 12 * 2 * 2 * 16 * 768);
  RunSettings fc2 = hf_vit_b16(TrainMode::kLora);
  fc2.lora.targets = {"fc2"};
  const Result<ModelContext> c = prepare_context(fc2);
  REQUIRE(c.is_ok());
  // fc2 is the layer's output.dense (3072 -> 768), not attention.output.dense.
  CHECK(c->graph.trainable_parameter_count() == 12 * 16 * (3072 + 768));
}

TEST_CASE("Flux at batch 2: to_out.0 and to_add_out keep contiguous copies of their slices") {
  models::ZooOptions options;
  graph::LayerGraph graph = models::build_zoo_model("flux-kontext-dev", options).value();
  const graph::GraphAnalysis before = graph::analyze_graph(graph);
  CHECK(apply_strided_slice_copies(graph, 1) == 0);
  graph::LayerGraph batched = graph;
  CHECK(apply_strided_slice_copies(batched, 2) == 2 * 19);  // two linears per double block
  const graph::GraphAnalysis after = graph::analyze_graph(batched);
  const GpuSpec gpu = find_gpu("h200").value();
  const int64_t seq = 2 * 32 * 32;  // two 512 px images of 16 px patches
  const StepProfile one = profile_step(graph, before, graph::DType::kBF16, 2, seq, Accounting::kAllocated, gpu);
  const StepProfile two = profile_step(batched, after, graph::DType::kBF16, 2, seq, Accounting::kAllocated, gpu);
  const int block = block_ending(graph, "transformer_blocks.0");
  // The image slice (B·S·h) and the text slice (B·T·h, T = 512) in bf16.
  CHECK(two.blocks[block].keep - one.blocks[block].keep == 2 * (seq + 512) * 3072 * 2);
}

// FluxSingleTransformerBlock.forward binds norm_hidden_states, mlp_hidden_states and
// attn_output until it returns and the cat until the gate's product; the loop holds the
// block's inputs (diffusers 0.39.0 transformer_flux.py; models/flux.cc single_block).
TEST_CASE("Flux's single-stream block holds what its forward binds until the residual add") {
  models::ZooOptions options;
  const graph::LayerGraph graph = models::build_zoo_model("flux-kontext-dev", options).value();
  const std::string p = "single_transformer_blocks.3";
  const graph::Node* residual = graph.find_node(p + ".residual");
  const graph::Node* gate = graph.find_node(p + ".gate");
  REQUIRE(residual != nullptr);
  REQUIRE(gate != nullptr);
  std::vector<std::string> producers;
  for (const std::string& held : residual->holds) {
    producers.push_back(graph.nodes[static_cast<size_t>(graph.producer_of(held))].name);
  }
  for (const char* made_by : {".norm.norm.shift", ".act_mlp"}) {
    CHECK(std::count(producers.begin(), producers.end(), p + made_by) == 1);
  }
  CHECK(std::count(residual->holds.begin(), residual->holds.end(), "single_transformer_blocks.2.out_image") == 1);
  CHECK(std::count(residual->holds.begin(), residual->holds.end(), "single_transformer_blocks.2.out_text") == 1);
  CHECK(std::count(gate->holds.begin(), gate->holds.end(), p + ".concat_attn_mlp") == 1);
  // Without them the GELU's output is let go at the cat, the normed input after its
  // last projection: the block's forward peaks lower.
  graph::LayerGraph released = graph;
  for (graph::Node& node : released.nodes) node.holds.clear();
  const GpuSpec gpu = find_gpu("h200").value();
  const int64_t seq = 32 * 32;
  const StepProfile held = profile_step(graph, graph::analyze_graph(graph), graph::DType::kBF16, 1, seq,
                                        Accounting::kAllocated, gpu);
  const StepProfile let_go = profile_step(released, graph::analyze_graph(released), graph::DType::kBF16, 1, seq,
                                          Accounting::kAllocated, gpu);
  const int block = block_ending(graph, p);
  CHECK(held.blocks[block].fwd_peak > let_go.blocks[block].fwd_peak);
}

}  // namespace
}  // namespace headroom::planner
