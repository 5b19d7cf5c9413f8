// What SD3's JointTransformerBlock.forward keeps bound past its tensors' last
// readers (diffusers 0.39.0 attention.py; models/sd3.cc hold_block_locals): the
// loop's arguments, `attn_output`, the feed-forward's `norm_hidden_states` and, in
// the context_pre_only block, `context_attn_output`, a view of the whole joint
// attention output. The meta-device oracle's diffusers-sd3 rows at 1024 px, batch 2
// peak at that block's ff.net.2 with all of them live.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph_analysis.h"
#include "planner/predict/model_context.h"
#include "planner/settings/hardware.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// The oracle's run: SD3.5-Large cut to 2 blocks, bf16 weights under autocast, LoRA
// on the eight attention projections, 1024 px (4096 image tokens), 77 + 77 text tokens.
RunSettings sd35_lora_1024(int64_t batch) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/sd3.5-large-2l/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.autocast = true;
  s.mode = TrainMode::kLora;
  s.lora.rank = 4;
  s.lora.dropout = 0.0;
  s.lora.targets = {"attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out",
                    "attn.to_k",       "attn.to_out.0",   "attn.to_q",       "attn.to_v"};
  s.micro_batch = batch;
  s.resolution = 1024;
  s.text_tokens = 77;
  return s;
}

bool holds(const graph::Node& node, const std::string& tensor) {
  return std::find(node.holds.begin(), node.holds.end(), tensor) != node.holds.end();
}

TEST_CASE("sd3's last block holds its arguments, attn_output and the context view until it returns") {
  const Result<ModelContext> context = prepare_context(sd35_lora_1024(2));
  REQUIRE(context.is_ok());
  const graph::LayerGraph& graph = context->graph;
  const std::string p = "transformer_blocks.1";
  const graph::Node* end = graph.find_node(p + ".ff.residual");
  REQUIRE(end != nullptr);
  for (const char* made_by : {".attn.merge_heads", ".attn_gate", ".norm2.shift", ".norm1_context.norm.shift"}) {
    CHECK_MESSAGE(holds(*end, p + made_by), std::string(made_by));
  }
  CHECK(holds(*end, "transformer_blocks.0.ff.residual"));          // hidden_states, the loop's argument
  CHECK(holds(*end, "transformer_blocks.0.ff_context.residual"));  // encoder_hidden_states
  // An earlier block's text stream runs after its image feed-forward: ff_output lives through it.
  CHECK(holds(*graph.find_node("transformer_blocks.0.ff_context.residual"), "transformer_blocks.0.ff.gate"));
}

// Without the holds the forward peaks elsewhere (at the attention); with them, at
// ff.net.2 (the GELU output in, its product out) with every held local live. So
// letting go of one of them there lowers the block's forward peak by its own bytes.
TEST_CASE("sd3 at 1024 px batch 2: each held local is live at the last block's forward peak") {
  const Result<ModelContext> context = prepare_context(sd35_lora_1024(2));
  REQUIRE(context.is_ok());
  const int64_t batch = 2;
  const int64_t s = 4096;
  const int64_t t = 154;
  const int64_t h = 38 * 64;
  const int block = block_ending(context->graph, "transformer_blocks.1");
  const auto fwd_peak = [&](const graph::LayerGraph& g) {
    return profile_step(g, graph::analyze_graph(g), context->compute_dtype, batch, s, Accounting::kAllocated,
                        context->gpu)
        .blocks[block]
        .fwd_peak;
  };
  const int64_t held = fwd_peak(context->graph);
  const std::string p = "transformer_blocks.1";
  // bf16, but fp32 where autocast's LayerNorm made it (the modulated inputs). The
  // block's two arguments are left out: the walk keeps a block's inputs through its
  // forward whether or not the loop's hold is written.
  const std::vector<std::pair<std::string, int64_t>> locals{
      {p + ".attn.merge_heads", batch * (s + t) * h * 2},  // context_attn_output's base
      {p + ".attn_gate", batch * s * h * 2},
      {p + ".norm2.shift", batch * s * h * 4},
      {p + ".norm1_context.norm.shift", batch * t * h * 4}};
  for (const auto& [tensor, bytes] : locals) {
    graph::LayerGraph released = context->graph;
    for (graph::Node& node : released.nodes) {
      if (node.name == p + ".ff.residual") std::erase(node.holds, tensor);
    }
    CHECK_MESSAGE(held - fwd_peak(released) == bytes, tensor);
  }
}

}  // namespace
}  // namespace headroom::planner
