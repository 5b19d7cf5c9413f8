#include "graph/validate.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "graph/layer_graph.h"

namespace headroom::graph {
namespace {

// The toy MLP of docs/layer-graph-format.md (tests/data/toy_mlp.json), built in
// code so each case can break one thing.
Node linear_node(const std::string& name, int block, const std::string& in, const std::string& out,
                 int64_t in_features, int64_t out_features) {
  Node node;
  node.name = name;
  node.op = "linear";
  node.block = block;
  node.inputs = {in};
  node.outputs = {out};
  node.params = {Param{name + ".weight", {out_features, in_features}, DType::kBF16, true, ""},
                 Param{name + ".bias", {out_features}, DType::kBF16, true, ""}};
  node.saves = {SavedRef{in, SaveWhen::kParamGrad}};
  node.fwd_flops = SizeExpr::per_token(2 * in_features * out_features);
  node.bwd_input_flops = node.fwd_flops;
  node.bwd_param_flops = SizeExpr::per_token(2 * in_features * out_features + out_features);
  node.fwd_io_elements = SizeExpr::per_token(in_features + out_features);
  node.linear = LinearInfo{in_features, out_features, SizeExpr::per_token(1)};
  return node;
}

LayerGraph toy() {
  LayerGraph graph;
  graph.name = "toy-mlp";
  graph.family = "toy";
  graph.sequence.default_seq = 128;
  graph.sequence.max_seq = 1024;
  graph.blocks = {Block{"mlp.0", "mlp", true}, Block{"head", "head", false}};
  graph.tensors = {
      Tensor{"x", SizeExpr::per_token(64), std::nullopt, false},
      Tensor{"labels", SizeExpr::per_token(1), DType::kInt64, false},
      Tensor{"h0", SizeExpr::per_token(256), std::nullopt, false},
      Tensor{"a0", SizeExpr::per_token(256), std::nullopt, false},
      Tensor{"y0", SizeExpr::per_token(64), std::nullopt, false},
      Tensor{"logits", SizeExpr::per_token(10), std::nullopt, false},
      Tensor{"loss", SizeExpr::constant(1), DType::kF32, false},
  };
  Node act;
  act.name = "mlp.0.act";
  act.op = "activation";
  act.inputs = {"h0"};
  act.outputs = {"a0"};
  act.saves = {SavedRef{"h0", SaveWhen::kInputGrad}};
  Node loss;
  loss.name = "head.loss";
  loss.op = "loss";
  loss.block = 1;
  loss.inputs = {"logits", "labels"};
  loss.outputs = {"loss"};
  loss.saves = {SavedRef{"logits", SaveWhen::kInputGrad}, SavedRef{"labels", SaveWhen::kInputGrad}};
  graph.nodes = {linear_node("mlp.0.fc1", 0, "x", "h0", 64, 256), act,
                 linear_node("mlp.0.fc2", 0, "a0", "y0", 256, 64),
                 linear_node("head.proj", 1, "y0", "logits", 64, 10), loss};
  return graph;
}

std::string error_of(const LayerGraph& graph) {
  const Status status = validate_graph(graph, "toy.json");
  REQUIRE_FALSE(status.is_ok());
  return status.message();
}

// The message starts with the origin and names the field path.
void check_error(const LayerGraph& graph, const std::string& path, const std::string& words) {
  const std::string message = error_of(graph);
  CAPTURE(message);
  CHECK(message.rfind("toy.json: " + path + ": ", 0) == 0);
  CHECK(message.find(words) != std::string::npos);
}

constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();

TEST_CASE("the toy graph is valid") { CHECK(validate_graph(toy(), "toy.json").is_ok()); }

TEST_CASE("header rules") {
  LayerGraph graph = toy();
  SUBCASE("version") {
    graph.version = 2;
    check_error(graph, "version", "unsupported version 2 (expected 1)");
  }
  SUBCASE("name") {
    graph.name.clear();
    check_error(graph, "name", "empty");
  }
  SUBCASE("no blocks") {
    graph.blocks.clear();
    check_error(graph, "blocks", "at least one block");
  }
  SUBCASE("no nodes") {
    graph.nodes.clear();
    check_error(graph, "nodes", "at least one node");
  }
}

TEST_CASE("sequence rules") {
  LayerGraph graph = toy();
  SUBCASE("unit") {
    graph.sequence.unit = "pixels";
    check_error(graph, "sequence.unit", "expected \"tokens\" or \"image\"");
  }
  SUBCASE("max_seq") {
    graph.sequence.max_seq = 0;
    check_error(graph, "sequence.max_seq", "at least 1");
  }
  SUBCASE("default_seq zero") {
    graph.sequence.default_seq = 0;
    check_error(graph, "sequence.default_seq", "expected 1 to max_seq = 1024");
  }
  SUBCASE("default_seq above max_seq") {
    graph.sequence.default_seq = 2048;
    check_error(graph, "sequence.default_seq", "2048");
  }
  SUBCASE("negative extra tokens") {
    graph.sequence.extra_tokens = -1;
    check_error(graph, "sequence.extra_tokens", "0 or more");
  }
  SUBCASE("image models") {
    graph.sequence.unit = "image";
    graph.sequence.patch_px = 16;
    graph.sequence.images = 1;
    graph.sequence.default_resolution = 256;
    CHECK(validate_graph(graph, "toy.json").is_ok());
    SUBCASE("patch_px") {
      graph.sequence.patch_px = 0;
      check_error(graph, "sequence.patch_px", "positive patch size");
    }
    SUBCASE("images") {
      graph.sequence.images = 0;
      check_error(graph, "sequence.images", "at least 1");
    }
    SUBCASE("default_resolution") {
      graph.sequence.default_resolution = -256;
      check_error(graph, "sequence.default_resolution", "positive resolution");
    }
  }
}

TEST_CASE("names are non-empty and unique") {
  LayerGraph graph = toy();
  SUBCASE("blocks") {
    graph.blocks[1].name = "mlp.0";
    check_error(graph, "blocks[1] (\"mlp.0\").name", "duplicate block name \"mlp.0\"");
  }
  SUBCASE("empty block name") {
    graph.blocks[0].name.clear();
    check_error(graph, "blocks[0].name", "empty");
  }
  SUBCASE("tensors") {
    graph.tensors[3].name = "h0";
    check_error(graph, "tensors[3] (\"h0\").name", "first used by tensors[2]");
  }
  SUBCASE("nodes") {
    graph.nodes[2].name = "mlp.0.fc1";
    check_error(graph, "nodes[2] (\"mlp.0.fc1\").name", "duplicate node name");
  }
  SUBCASE("params") {
    graph.nodes[3].params[0].name = "mlp.0.fc1.weight";
    check_error(graph, "nodes[3] (\"head.proj\").params[0] (\"mlp.0.fc1.weight\").name",
                "first used by nodes[0] (\"mlp.0.fc1\").params[0]");
  }
  SUBCASE("empty param name") {
    graph.nodes[0].params[1].name.clear();
    check_error(graph, "nodes[0] (\"mlp.0.fc1\").params[1].name", "empty");
  }
}

TEST_CASE("tied parameters") {
  LayerGraph graph = toy();
  // head.proj.weight is [10, 64]; give fc2's weight a tied twin of the same size.
  Param tied{"head.proj.weight_tied", {64, 10}, DType::kBF16, true, "head.proj.weight"};
  graph.nodes[4].params.push_back(tied);
  CHECK(validate_graph(graph, "toy.json").is_ok());
  const std::string path = "nodes[4] (\"head.loss\").params[0] (\"head.proj.weight_tied\").tied_to";
  SUBCASE("unknown target") {
    graph.nodes[4].params[0].tied_to = "lm_head.weight";
    check_error(graph, path, "unknown parameter \"lm_head.weight\"");
  }
  SUBCASE("different element count") {
    graph.nodes[4].params[0].shape = {64, 11};
    check_error(graph, path, "element count 704 differs from 640");
  }
  SUBCASE("tied to itself") {
    graph.nodes[4].params[0].tied_to = "head.proj.weight_tied";
    check_error(graph, path, "expected an untied parameter");
  }
  SUBCASE("chain") {
    graph.nodes[3].params[0].tied_to = "mlp.0.fc1.bias";  // shapes differ, but chain is first
    graph.nodes[3].params[0].shape = {256};
    check_error(graph, path, "is itself tied");
  }
}

TEST_CASE("a buffer is neither trainable nor tied") {
  LayerGraph graph = toy();
  graph.nodes[0].params.push_back(Param{"mlp.0.fc1.running_mean", {256}, DType::kF32, false, "", true});
  CHECK(validate_graph(graph, "toy.json").is_ok());
  graph.nodes[0].params.back().trainable = true;
  check_error(graph, "nodes[0] (\"mlp.0.fc1\").params[2] (\"mlp.0.fc1.running_mean\").buffer",
              "buffers are never trained");
}

TEST_CASE("only a buffer may be left out of the state dict") {
  LayerGraph graph = toy();
  graph.nodes[0].params.push_back(Param{"mlp.0.fc1.cos_cached", {256}, DType::kF32, false, "", true});
  graph.nodes[0].params.back().persistent = false;
  CHECK(validate_graph(graph, "toy.json").is_ok());
  graph.nodes[0].params.back().buffer = false;
  check_error(graph, "nodes[0] (\"mlp.0.fc1\").params[2] (\"mlp.0.fc1.cos_cached\").persistent",
              "expected only a buffer");
}

TEST_CASE("node references") {
  LayerGraph graph = toy();
  SUBCASE("unknown input: the message in full") {
    graph.nodes[3].inputs[0] = "h7";
    CHECK(error_of(graph) ==
          "toy.json: nodes[3] (\"head.proj\").inputs[0]: unknown tensor \"h7\" "
          "(expected the name of a tensor in \"tensors\")");
  }
  SUBCASE("unknown output") {
    graph.nodes[1].outputs[0] = "nope";
    check_error(graph, "nodes[1] (\"mlp.0.act\").outputs[0]", "unknown tensor \"nope\"");
  }
  SUBCASE("unknown saved tensor") {
    graph.nodes[1].saves[0].tensor = "nope";
    check_error(graph, "nodes[1] (\"mlp.0.act\").saves[0].tensor", "unknown tensor");
  }
  SUBCASE("two producers") {
    graph.nodes[2].outputs[0] = "a0";
    check_error(graph, "nodes[2] (\"mlp.0.fc2\").outputs[0]",
                "already produced by nodes[1] (\"mlp.0.act\")");
  }
  SUBCASE("saving a tensor the node does not touch") {
    graph.nodes[1].saves[0].tensor = "x";
    check_error(graph, "nodes[1] (\"mlp.0.act\").saves[0].tensor",
                "neither an input nor an output");
  }
  SUBCASE("saving its own output is fine") {
    graph.nodes[1].saves[0].tensor = "a0";
    CHECK(validate_graph(graph, "toy.json").is_ok());
  }
  SUBCASE("block out of range") {
    graph.nodes[0].block = 2;
    check_error(graph, "nodes[0] (\"mlp.0.fc1\").block", "expected 0 to 1");
    graph.nodes[0].block = -1;
    check_error(graph, "nodes[0] (\"mlp.0.fc1\").block", "out of range");
  }
  SUBCASE("empty op") {
    graph.nodes[1].op.clear();
    check_error(graph, "nodes[1] (\"mlp.0.act\").op", "empty");
  }
}

TEST_CASE("parameter shapes") {
  LayerGraph graph = toy();
  const std::string path = "nodes[0] (\"mlp.0.fc1\").params[0] (\"mlp.0.fc1.weight\")";
  SUBCASE("zero dimension") {
    graph.nodes[0].params[0].shape = {256, 0};
    check_error(graph, path + ".shape[1]", "positive dimension");
  }
  SUBCASE("negative dimension") {
    graph.nodes[0].params[0].shape = {-1, 64};
    check_error(graph, path + ".shape[0]", "positive dimension");
  }
  SUBCASE("element count overflow") {
    graph.nodes[0].params[0].shape = {int64_t{1} << 32, int64_t{1} << 32};
    check_error(graph, path + ".shape", "overflows int64");
  }
  SUBCASE("bit count overflow") {
    graph.nodes[0].params[0].shape = {int64_t{1} << 30, int64_t{1} << 30};
    check_error(graph, path + ".shape", "size in bits");
  }
  SUBCASE("scalar parameter") {
    graph.nodes[0].params[1].shape = {};
    CHECK(validate_graph(graph, "toy.json").is_ok());
  }
}

TEST_CASE("sizes are non-negative and fit at B = 1024, S = max_seq") {
  LayerGraph graph = toy();
  SUBCASE("negative tensor size") {
    graph.tensors[2].elements = SizeExpr::per_token(-256);
    check_error(graph, "tensors[2] (\"h0\").elements", "negative coefficient in -256*B*S");
  }
  SUBCASE("tensor elements overflow") {
    // 2^40 * 1024 * 1024^2 = 2^70.
    graph.tensors[2].elements = SizeExpr{0, 0, 0, 0, 0, int64_t{1} << 40};
    check_error(graph, "tensors[2] (\"h0\").elements", "overflows int64 at B = 1024, S = 1024");
  }
  SUBCASE("tensor bytes overflow") {
    graph.tensors[2].elements = SizeExpr::constant(kHuge / 4);
    check_error(graph, "tensors[2] (\"h0\").elements", "byte size overflows");
  }
  SUBCASE("max_seq decides") {
    graph.tensors[2].elements = SizeExpr{0, 0, 0, 0, 0, int64_t{1} << 20};  // 2^50 at 1024
    CHECK(validate_graph(graph, "toy.json").is_ok());
    graph.sequence.max_seq = 1 << 20;  // 2^20 * 2^10 * 2^40 = 2^70
    check_error(graph, "tensors[2] (\"h0\").elements", "S = 1048576");
  }
  SUBCASE("negative flops") {
    graph.nodes[1].fwd_flops = SizeExpr::constant(-1);
    check_error(graph, "nodes[1] (\"mlp.0.act\").fwd_flops", "negative coefficient");
  }
  SUBCASE("each node size is checked") {
    Node& node = graph.nodes[2];
    const SizeExpr huge = SizeExpr{0, kHuge, 0, 0, 0, 0};
    node.bwd_input_flops = huge;
    check_error(graph, "nodes[2] (\"mlp.0.fc2\").bwd_input_flops", "overflows");
    node.bwd_input_flops = {};
    node.bwd_param_flops = huge;
    check_error(graph, "nodes[2] (\"mlp.0.fc2\").bwd_param_flops", "overflows");
    node.bwd_param_flops = {};
    node.fwd_io_elements = huge;
    check_error(graph, "nodes[2] (\"mlp.0.fc2\").fwd_io_elements", "overflows");
    node.fwd_io_elements = {};
    node.workspace_elements = huge;
    check_error(graph, "nodes[2] (\"mlp.0.fc2\").workspace_elements", "overflows");
    node.workspace_elements = {};
    node.linear->rows = huge;
    check_error(graph, "nodes[2] (\"mlp.0.fc2\").linear.rows", "overflows");
  }
  SUBCASE("linear features") {
    graph.nodes[0].linear->in_features = 0;
    check_error(graph, "nodes[0] (\"mlp.0.fc1\").linear", "expected both positive");
  }
}

TEST_CASE("block order") {
  LayerGraph graph = toy();
  // A node of block 0 that reads the head's logits.
  graph.tensors.push_back(Tensor{"probe", SizeExpr::per_token(1), std::nullopt, false});
  Node probe;
  probe.name = "mlp.0.probe";
  probe.op = "mul";
  probe.block = 0;
  probe.inputs = {"x", "logits"};
  probe.outputs = {"probe"};
  graph.nodes.push_back(probe);
  check_error(graph, "nodes[5] (\"mlp.0.probe\").inputs[1]",
              "produced in the later block blocks[1] (\"head\")");
  graph.nodes.back().block = 1;
  CHECK(validate_graph(graph, "toy.json").is_ok());
}

TEST_CASE("cycles") {
  LayerGraph graph = toy();
  SUBCASE("three nodes") {
    // fc1 also reads fc2's output: fc1 -> act -> fc2 -> fc1.
    graph.nodes[0].inputs.push_back("y0");
    const std::string message = error_of(graph);
    CAPTURE(message);
    CHECK(message.find("toy.json: nodes[") == 0);
    CHECK(message.find("on a cycle") != std::string::npos);
    CHECK(message.find("\"mlp.0.fc1\" -> \"mlp.0.act\" -> \"mlp.0.fc2\" -> \"mlp.0.fc1\"") !=
          std::string::npos);
  }
  SUBCASE("a node reading its own output") {
    graph.nodes[1].inputs.push_back("a0");
    check_error(graph, "nodes[1] (\"mlp.0.act\")", "\"mlp.0.act\" -> \"mlp.0.act\"");
  }
  SUBCASE("across blocks the cycle is reported, not the block order") {
    graph.nodes[0].inputs.push_back("logits");
    check_error(graph, "nodes[0] (\"mlp.0.fc1\")", "on a cycle");
  }
}

TEST_CASE("graph inputs need no producer") {
  LayerGraph graph = toy();
  graph.tensors.push_back(Tensor{"unused_input", SizeExpr::per_sample(3), DType::kF32, true});
  graph.nodes[4].inputs.push_back("unused_input");
  CHECK(validate_graph(graph, "toy.json").is_ok());
}

}  // namespace
}  // namespace headroom::graph
