#include "graph/graph_json.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "graph/atomic_file.h"
#include "tests/support/temp_dir.h"

namespace headroom::graph {
namespace {

using headroom::testing::TempDir;

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kToyPath = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/toy_mlp.json";

json toy_json() {
  Result<std::string> text = read_file(kToyPath);
  REQUIRE(text.is_ok());
  return json::parse(text.value());
}

// Reads `j` as a graph from "m.json" and returns the error, which must start
// with the origin and the field path.
void check_error(const json& j, const std::string& path, const std::string& words) {
  const Result<LayerGraph> graph = graph_from_json(j, "m.json");
  REQUIRE_FALSE(graph.is_ok());
  CAPTURE(graph.message());
  CHECK(graph.message().rfind("m.json: " + path + ": ", 0) == 0);
  CHECK(graph.message().find(words) != std::string::npos);
}

// A graph that uses every optional feature of the format.
LayerGraph rich_graph() {
  Result<LayerGraph> toy = graph_from_json(toy_json(), "toy");
  REQUIRE(toy.is_ok());
  LayerGraph graph = toy.value();
  graph.sequence = SequenceSpec{"image", 1024, 4096, 16, 2, 77, 512};
  graph.tensors[0].requires_grad = true;
  graph.tensors[0].dtype = DType::kF8E4M3;
  graph.tensors[2].elements = SizeExpr{1, 2, 3, 4, 5, 6};
  graph.nodes[1].workspace_elements = SizeExpr{0, 0, 0, 0, 7, 8};
  graph.nodes[1].fwd_io_f32_elements = SizeExpr{0, 0, 0, 9, 0, 0};
  graph.nodes[3].params[0].trainable = false;
  graph.nodes[3].params[1].dtype = DType::kNF4;
  graph.nodes[4].params.push_back(
      Param{"head.loss.tied", {64, 10}, DType::kBF16, true, "head.proj.weight"});
  // A module buffer (BatchNorm's num_batches_tracked): stored, never trained.
  graph.nodes[4].params.push_back(Param{"head.loss.steps", {}, DType::kInt64, false, "", true});
  graph.nodes[0].saves[0].when = SaveWhen::kAnyGrad;
  graph.nodes[2].linear.reset();
  return graph;
}

TEST_CASE("the documented toy graph loads") {
  const Result<LayerGraph> graph = load_graph_file(kToyPath);
  REQUIRE_MESSAGE(graph.is_ok(), graph.message());
  CHECK(graph->name == "toy-mlp");
  CHECK(graph->blocks.size() == 2);
  CHECK(graph->tensors.size() == 7);
  CHECK(graph->nodes.size() == 5);
  // fc1 64x256+256, fc2 256x64+64, head 64x10+10.
  CHECK(graph->parameter_count() == 16384 + 256 + 16384 + 64 + 640 + 10);
  CHECK_FALSE(graph->tensors[0].dtype.has_value());  // absent: the compute dtype
  CHECK(graph->tensors[1].dtype == DType::kInt64);
  CHECK(graph->nodes[0].saves[0].when == SaveWhen::kParamGrad);
  CHECK(graph->nodes[1].saves[0].when == SaveWhen::kInputGrad);
  CHECK(graph->nodes[4].fwd_io_elements == SizeExpr{1, 0, 0, 11, 0, 0});
  CHECK(graph->tensors[6].elements == SizeExpr::constant(1));
  REQUIRE(graph->nodes[0].linear.has_value());
  CHECK(graph->nodes[0].linear->out_features == 256);
  CHECK_FALSE(graph->blocks[1].checkpointable);
}

TEST_CASE("the example in docs/layer-graph-format.md is tests/data/toy_mlp.json") {
  const Result<std::string> doc =
      read_file(std::string(HEADROOM_SOURCE_DIR) + "/docs/layer-graph-format.md");
  REQUIRE(doc.is_ok());
  const std::string begin = "<!-- toy_mlp.json: begin -->\n```json\n";
  const size_t start = doc.value().find(begin);
  const size_t end = doc.value().find("```\n<!-- toy_mlp.json: end -->");
  REQUIRE(start != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string block = doc.value().substr(start + begin.size(), end - start - begin.size());
  CHECK(json::parse(block) == toy_json());
}

TEST_CASE("round trip through JSON is exact") {
  for (const LayerGraph& graph : {graph_from_json(toy_json(), "toy").value(), rich_graph()}) {
    const json written = graph_to_json(graph);
    const Result<LayerGraph> read = graph_from_json(written, "round-trip");
    REQUIRE_MESSAGE(read.is_ok(), read.message());
    CHECK(graphs_equal(read.value(), graph));
    CHECK(graph_to_json(read.value()) == written);
  }
}

TEST_CASE("round trip through a file is exact") {
  TempDir dir;
  const std::string path = dir.file("rich.json");
  const LayerGraph graph = rich_graph();
  REQUIRE(save_graph_file(graph, path).is_ok());
  const Result<LayerGraph> read = load_graph_file(path);
  REQUIRE_MESSAGE(read.is_ok(), read.message());
  CHECK(graphs_equal(read.value(), graph));
  const std::string text = read_file(path).value();
  CHECK(text.back() == '\n');
}

TEST_CASE("a non-persistent fp32 buffer (a RoPE cache) round-trips, its keys written only when set") {
  LayerGraph graph = rich_graph();
  graph.nodes[4].params[1].persistent = false;
  graph.nodes[4].params[1].upcast_fp32 = true;
  const json written = graph_to_json(graph);
  CHECK(written["nodes"][4]["params"][1]["persistent"] == false);
  CHECK(written["nodes"][4]["params"][1]["upcast_fp32"] == true);
  CHECK_FALSE(written["nodes"][4]["params"][0].contains("persistent"));
  CHECK_FALSE(written["nodes"][4]["params"][0].contains("upcast_fp32"));
  const Result<LayerGraph> read = graph_from_json(written, "round-trip");
  REQUIRE_MESSAGE(read.is_ok(), read.message());
  CHECK(graphs_equal(read.value(), graph));
}

TEST_CASE("a node's holds round-trip, written only when set, and must name known tensors") {
  LayerGraph graph = rich_graph();
  graph.nodes[3].holds = {graph.tensors[0].name};
  json written = graph_to_json(graph);
  CHECK(written["nodes"][3]["holds"] == json::array({graph.tensors[0].name}));
  CHECK_FALSE(written["nodes"][2].contains("holds"));
  const Result<LayerGraph> read = graph_from_json(written, "round-trip");
  REQUIRE_MESSAGE(read.is_ok(), read.message());
  CHECK(graphs_equal(read.value(), graph));
  LayerGraph other = graph;
  other.nodes[3].holds.clear();
  CHECK_FALSE(graphs_equal(other, graph));
  written["nodes"][3]["holds"] = json::array({"no_such_tensor"});
  check_error(written, "nodes[3] (\"" + graph.nodes[3].name + "\").holds[0]", "unknown tensor");
}

TEST_CASE("a buffer is written only when set and is not a parameter of the model") {
  const LayerGraph graph = rich_graph();
  const json written = graph_to_json(graph);
  CHECK(written["nodes"][4]["params"][1]["buffer"] == true);
  CHECK_FALSE(written["nodes"][4]["params"][0].contains("buffer"));
  // 16,384 + 256 + 16,384 + 64 + 640 + 10 toy parameters: the buffer's one element is not among them.
  CHECK(graph.parameter_count() == 33738);
}

TEST_CASE("graphs_equal notices each kind of difference") {
  const LayerGraph base = rich_graph();
  CHECK(graphs_equal(base, base));
  auto differs = [&](auto change) {
    LayerGraph other = base;
    change(other);
    return !graphs_equal(base, other);
  };
  CHECK(differs([](LayerGraph& g) { g.description += "!"; }));
  CHECK(differs([](LayerGraph& g) { g.sequence.extra_tokens = 0; }));
  CHECK(differs([](LayerGraph& g) { g.lora_targets.clear(); }));
  CHECK(differs([](LayerGraph& g) { g.blocks[0].checkpointable = false; }));
  CHECK(differs([](LayerGraph& g) { g.tensors[1].dtype.reset(); }));
  CHECK(differs([](LayerGraph& g) { g.tensors[0].requires_grad = false; }));
  CHECK(differs([](LayerGraph& g) { g.nodes[0].saves[0].when = SaveWhen::kInputGrad; }));
  CHECK(differs([](LayerGraph& g) { g.nodes[4].params[0].tied_to.clear(); }));
  CHECK(differs([](LayerGraph& g) { g.nodes[4].params[1].buffer = false; }));
  CHECK(differs([](LayerGraph& g) { g.nodes[4].params[1].persistent = false; }));
  CHECK(differs([](LayerGraph& g) { g.nodes[4].params[1].upcast_fp32 = true; }));
  CHECK(differs([](LayerGraph& g) { g.nodes[0].linear->rows.bs = 2; }));
  CHECK(differs([](LayerGraph& g) { g.nodes[2].linear = g.nodes[0].linear; }));
  CHECK(differs([](LayerGraph& g) { g.nodes[1].workspace_elements.ss = 0; }));
  CHECK(differs([](LayerGraph& g) { g.nodes[1].fwd_io_f32_elements = {}; }));
}

TEST_CASE("size expressions in JSON") {
  CHECK(size_expr_to_json(SizeExpr{}) == json(0));
  CHECK(size_expr_to_json(SizeExpr::constant(5)) == json(5));
  CHECK(size_expr_to_json(SizeExpr{0, 0, 0, 4096, 0, 32}) == json{{"bs", 4096}, {"bss", 32}});
  CHECK(size_expr_from_json(json(7), "x").value() == SizeExpr::constant(7));
  CHECK(size_expr_from_json(json::object(), "x").value() == SizeExpr{});
  CHECK(
      size_expr_from_json(json{{"c", 1}, {"b", 2}, {"s", 3}, {"bs", 4}, {"ss", 5}, {"bss", 6}}, "x")
          .value() == SizeExpr{1, 2, 3, 4, 5, 6});
  auto error = [](const json& j) {
    const Result<SizeExpr> expr = size_expr_from_json(j, "nodes[0].fwd_flops");
    REQUIRE_FALSE(expr.is_ok());
    return expr.message();
  };
  CHECK(error(json(-1)) ==
        "nodes[0].fwd_flops: negative coefficient in -1 (expected "
        "non-negative counts)");
  CHECK(error(json{{"bs", 1.5}}).find("nodes[0].fwd_flops.bs: expected an integer, got number") ==
        0);
  CHECK(error(json{{"q", 1}}).find("nodes[0].fwd_flops.q: unknown key") == 0);
  CHECK(error(json("12")).find("expected an integer or an object") != std::string::npos);
  CHECK(error(json(std::numeric_limits<uint64_t>::max())).find("out of range") !=
        std::string::npos);
  CHECK(error(json::parse("1e30")).find("expected an integer or an object") != std::string::npos);
}

TEST_CASE("wrong types and missing fields name the field") {
  json j = toy_json();
  SUBCASE("top level not an object") {
    check_error(json::array(), "(top level)", "expected an object, got array");
  }
  SUBCASE("name") {
    j["name"] = 5;
    check_error(j, "name", "expected a string, got number");
  }
  SUBCASE("checkpointable") {
    j["blocks"][0]["checkpointable"] = "yes";
    check_error(j, "blocks[0] (\"mlp.0\").checkpointable", "expected true or false, got string");
  }
  SUBCASE("block index") {
    j["nodes"][0]["block"] = 1.5;
    check_error(j, "nodes[0] (\"mlp.0.fc1\").block", "expected an integer");
  }
  SUBCASE("inputs") {
    j["nodes"][0]["inputs"] = "x";
    check_error(j, "nodes[0] (\"mlp.0.fc1\").inputs", "expected an array, got string");
  }
  SUBCASE("input element") {
    j["nodes"][0]["inputs"][0] = nullptr;
    check_error(j, "nodes[0] (\"mlp.0.fc1\").inputs[0]", "expected a string, got null");
  }
  SUBCASE("shape element") {
    j["nodes"][0]["params"][0]["shape"][1] = "64";
    check_error(j, "nodes[0] (\"mlp.0.fc1\").params[0] (\"mlp.0.fc1.weight\").shape[1]",
                "expected an integer, got string");
  }
  SUBCASE("missing op") {
    j["nodes"][0].erase("op");
    check_error(j, "nodes[0] (\"mlp.0.fc1\").op", "missing required field");
  }
  SUBCASE("missing nodes") {
    j.erase("nodes");
    check_error(j, "nodes", "missing required field");
  }
  SUBCASE("missing flops") {
    j["nodes"][1].erase("bwd_param_flops");
    check_error(j, "nodes[1] (\"mlp.0.act\").bwd_param_flops", "missing required field");
  }
  SUBCASE("block index beyond int") {
    j["nodes"][0]["block"] = int64_t{1} << 40;
    check_error(j, "nodes[0] (\"mlp.0.fc1\").block", "32-bit");
  }
}

TEST_CASE("unknown keys and names") {
  json j = toy_json();
  SUBCASE("top-level key") {
    j["nodez"] = json::array();
    check_error(j, "nodez", "unknown key (expected one of format, version, name");
  }
  SUBCASE("nested key") {
    j["blocks"][1]["chekpointable"] = true;
    check_error(j, "blocks[1] (\"head\").chekpointable", "unknown key");
  }
  SUBCASE("dtype") {
    j["nodes"][0]["params"][0]["dtype"] = "f33";
    check_error(j, "nodes[0] (\"mlp.0.fc1\").params[0] (\"mlp.0.fc1.weight\").dtype",
                "unknown dtype \"f33\" (expected one of f32, f16, bf16");
  }
  SUBCASE("dtype aliases are accepted") {
    j["tensors"][1]["dtype"] = "int64";
    CHECK(graph_from_json(j, "m.json").is_ok());
  }
  SUBCASE("save condition") {
    j["nodes"][1]["saves"][0]["when"] = "always";
    check_error(j, "nodes[1] (\"mlp.0.act\").saves[0].when",
                "unknown condition \"always\" (expected one of input_grad, param_grad, any_grad, other_input_grad)");
  }
  SUBCASE("format") {
    j["format"] = "headroom.plan";
    check_error(j, "format", "expected \"headroom.layer_graph\"");
  }
  SUBCASE("version comes before unknown keys") {
    j["version"] = 2;
    j["new_field"] = 1;
    check_error(j, "version", "unsupported version 2 (expected 1)");
  }
}

TEST_CASE("validation runs on every graph read") {
  json j = toy_json();
  SUBCASE("unknown tensor") {
    j["nodes"][3]["inputs"][0] = "h7";
    check_error(j, "nodes[3] (\"head.proj\").inputs[0]", "unknown tensor \"h7\"");
  }
  SUBCASE("negative size") {
    j["tensors"][2]["elements"] = {{"bs", -256}};
    check_error(j, "tensors[2] (\"h0\").elements", "negative coefficient");
  }
  SUBCASE("huge coefficient that overflows at B = 1024, S = max_seq") {
    j["tensors"][2]["elements"] = {{"bss", int64_t{1} << 40}};
    check_error(j, "tensors[2] (\"h0\").elements", "overflows int64");
  }
  SUBCASE("coefficient beyond int64") {
    j["nodes"][0]["fwd_flops"] = {{"bs", std::numeric_limits<uint64_t>::max()}};
    check_error(j, "nodes[0] (\"mlp.0.fc1\").fwd_flops.bs", "out of range");
  }
  SUBCASE("cycle") {
    j["nodes"][0]["inputs"].push_back("a0");
    check_error(j, "nodes[0] (\"mlp.0.fc1\")", "on a cycle");
  }
}

TEST_CASE("malformed and hostile text") {
  auto parse_error = [](const std::string& text) {
    const Result<json> parsed = parse_json_text(text, "m.json");
    REQUIRE_FALSE(parsed.is_ok());
    return parsed.message();
  };
  SUBCASE("syntax error names the byte") {
    const std::string message = parse_error("{\"name\": tru}");
    CAPTURE(message);
    CHECK(message.rfind("m.json: invalid JSON at byte ", 0) == 0);
    CHECK(message.find("line 1, column") != std::string::npos);
  }
  SUBCASE("empty") { CHECK(parse_error("").find("m.json: invalid JSON at byte 1") == 0); }
  SUBCASE("truncated file") {
    const std::string text = read_file(kToyPath).value();
    for (size_t cut : {size_t{1}, text.size() / 3, text.size() / 2, text.size() - 3}) {
      CAPTURE(cut);
      CHECK(parse_error(text.substr(0, cut)).find("invalid JSON") != std::string::npos);
    }
  }
  SUBCASE("deep arrays are rejected, not recursed into") {
    const std::string message = parse_error(std::string(100000, '['));
    CHECK(message == "m.json: JSON nested deeper than 64 levels (expected a flatter file)");
  }
  SUBCASE("deep objects") {
    std::string text;
    for (int i = 0; i < 100000; ++i) text += "{\"a\":";
    CHECK(parse_error(text).find("nested deeper than 64") != std::string::npos);
  }
  SUBCASE("64 levels are fine") {
    const std::string text = std::string(64, '[') + std::string(64, ']');
    CHECK(parse_json_text(text, "m.json").is_ok());
    CHECK_FALSE(parse_json_text("[" + text + "]", "m.json").is_ok());
  }
  SUBCASE("duplicate keys") {
    CHECK(parse_error("{\"a\": 1, \"b\": {\"a\": 2, \"a\": 3}}") ==
          "m.json: b.a: duplicate key (expected each key once)");
    CHECK(parse_error("{\"x\": [0, {\"k\": 1, \"k\": 2}]}") == "m.json: x[1].k: duplicate key (expected each key once)");
    CHECK(
        parse_json_text("{\"a\": {\"a\": 1}, \"b\": [{\"a\": 1}, {\"a\": 2}]}", "m.json").is_ok());
  }
  SUBCASE("invalid UTF-8") {
    CHECK(parse_error("\"\xff\"").find("invalid JSON") != std::string::npos);
  }
  SUBCASE("trailing garbage") {
    CHECK(parse_error("{} x").find("invalid JSON") != std::string::npos);
  }
}

TEST_CASE("load_graph_file errors") {
  TempDir dir;
  SUBCASE("missing file") {
    const Result<LayerGraph> graph = load_graph_file(dir.file("none.json"));
    REQUIRE_FALSE(graph.is_ok());
    CHECK(graph.message() == dir.file("none.json") + ": no such file");
  }
  SUBCASE("parse errors carry the file name") {
    std::ofstream(dir.file("bad.json")) << "{\"format\": ";
    const Result<LayerGraph> graph = load_graph_file(dir.file("bad.json"));
    REQUIRE_FALSE(graph.is_ok());
    CHECK(graph.message().rfind(dir.file("bad.json") + ": invalid JSON at byte", 0) == 0);
  }
  SUBCASE("field errors carry the file name") {
    json j = toy_json();
    j["name"] = "";
    std::ofstream(dir.file("empty_name.json")) << j.dump();
    const Result<LayerGraph> graph = load_graph_file(dir.file("empty_name.json"));
    REQUIRE_FALSE(graph.is_ok());
    CHECK(graph.message().rfind(dir.file("empty_name.json") + ": name: empty", 0) == 0);
  }
  SUBCASE("files over 256 MiB are refused before reading") {
    const std::string path = dir.file("huge.json");
    std::ofstream(path).close();
    fs::resize_file(path, kMaxGraphFileBytes + 1);  // sparse: no disk used
    const Result<LayerGraph> graph = load_graph_file(path);
    REQUIRE_FALSE(graph.is_ok());
    CHECK(graph.message().find("file too large") != std::string::npos);
  }
}

TEST_CASE("save_graph_file refuses what it could not read back") {
  TempDir dir;
  const std::string path = dir.file("out.json");
  std::ofstream(path) << "old";
  LayerGraph graph = rich_graph();
  SUBCASE("invalid graph") {
    graph.nodes[0].inputs[0] = "h7";
    const Status status = save_graph_file(graph, path);
    REQUIRE_FALSE(status.is_ok());
    CHECK(status.message().rfind(path + ": nodes[0]", 0) == 0);
  }
  SUBCASE("names that are not UTF-8") {
    graph.description = "\xff";
    const Status status = save_graph_file(graph, path);
    REQUIRE_FALSE(status.is_ok());
    CHECK(status.message().find("cannot write the graph as JSON") != std::string::npos);
  }
  CHECK(read_file(path).value() == "old");
}

}  // namespace
}  // namespace headroom::graph

TEST_CASE("numbers a double cannot hold are a clear error naming the field (found by fuzzing, issue 14)") {
  const auto parsed = headroom::graph::parse_json_text("{\"a\": 1e4096}", "big.json");
  REQUIRE_FALSE(parsed.is_ok());
  CHECK(parsed.message() ==
        "big.json: a: number overflow: 1e4096 does not fit a double (expected numbers a double can hold, up to "
        "about 1.8e308)");
  const auto nested = headroom::graph::parse_json_text("{\"zero\": {\"stage\": [1, -1e400]}}", "ds.json");
  REQUIRE_FALSE(nested.is_ok());
  CHECK(nested.message().find("ds.json: zero.stage[1]: number overflow: -1e400") == 0);
  const auto top = headroom::graph::parse_json_text("1e400", "top.json");
  REQUIRE_FALSE(top.is_ok());
  CHECK(top.message().find("top.json: (top level): number overflow") == 0);
}

TEST_CASE("parse_json_text builds what nlohmann's parser builds") {
  const std::string text =
      R"({"a": [1, 2.5, -3, 18446744073709551615, true, null, "s", {"b": []}], "c": {"d": {"e": [[], [{}]]}}, "": 0})";
  const auto parsed = headroom::graph::parse_json_text(text, "same.json");
  REQUIRE(parsed.is_ok());
  CHECK(parsed.value() == nlohmann::json::parse(text));
  CHECK(parsed.value()["a"][3].is_number_unsigned());
}
