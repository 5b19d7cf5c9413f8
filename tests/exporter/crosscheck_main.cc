// The exporter cross-check (issue 5): what PyTorch really keeps for backward,
// traced on CPU by scripts/exporter/crosscheck.py, against what the C++
// builders predict for the same tiny config, block by block.
//
//   exporter_crosscheck DIR
//
// DIR holds one folder per family with config.json (the tiny config) and
// trace_<attention>.json (batch, seq and per-block keep bytes). Each
// checkpointable block must agree within 1%; the other blocks (embeddings,
// heads) are printed for information. The builder side is the bytes of the
// tensors graph::analyze_graph attributes to the block, at the traced batch,
// sequence and compute dtype: planner::profile_step's `keep` without the
// allocator's 512-byte rounding, which would hide differences at tiny sizes.
//
// Exit status: 0 all agree; 1 a block differs by more than 1% or is missing;
// 77 (CTest's skip code) when DIR holds no traces (no .venv or transformers).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "graph/graph_analysis.h"
#include "models/hf_import.h"

namespace {

namespace fs = std::filesystem;
using headroom::graph::DType;

constexpr double kTolerance = 0.01;
constexpr int kSkip = 77;

struct Trace {
  std::string family;
  std::string attention;
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t image_px = 0;  // Qwen2.5-VL: the image's side (0: none)
  int64_t target_seq = 0;  // T5: the decoder's tokens per sample (0: not an encoder-decoder)
  struct Block {
    std::string name;
    bool checkpointable = false;
    int64_t keep_bytes = 0;
    std::string not_compared;  // why this block is printed but not compared
  };
  std::vector<Block> blocks;
};

Trace read_trace(const fs::path& path) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  Trace t;
  t.family = j.at("family").get<std::string>();
  t.attention = j.at("attention").get<std::string>();
  t.batch = j.at("batch").get<int64_t>();
  t.seq = j.at("seq").get<int64_t>();
  t.image_px = j.value("image_px", int64_t{0});
  t.target_seq = j.value("target_seq", int64_t{0});
  for (const auto& b : j.at("blocks")) {
    t.blocks.push_back({b.at("name").get<std::string>(), b.at("checkpointable").get<bool>(),
                        b.at("keep_bytes").get<int64_t>(), b.value("not_compared", std::string())});
  }
  return t;
}

// Bytes each block of the builder's graph keeps, by block name. With `verbose`,
// lists the tensors of every block (to find where a disagreement comes from).
// What a Python frame holds (Node::holds) is no saved tensor and the tracer cannot
// see it; held across blocks it would be persistent and leave its block: dropped.
std::map<std::string, int64_t> builder_keep(headroom::graph::LayerGraph graph,
                                            int64_t batch, int64_t seq, bool verbose) {
  for (headroom::graph::Node& node : graph.nodes) node.holds.clear();
  const headroom::graph::GraphAnalysis analysis = headroom::graph::analyze_graph(graph);
  std::map<std::string, int64_t> out;
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    int64_t bytes = 0;
    for (int t : analysis.blocks[b].saved_tensors) {
      const headroom::graph::Tensor& tensor = graph.tensors[static_cast<size_t>(t)];
      const int64_t tensor_bytes = headroom::graph::tensor_bytes(tensor, DType::kBF16, batch, seq);
      if (verbose) {
        std::printf("    builder %s keeps %s: %lld B\n", graph.blocks[b].name.c_str(),
                    tensor.name.c_str(), static_cast<long long>(tensor_bytes));
      }
      bytes += tensor_bytes;
    }
    out[graph.blocks[b].name] = bytes;
  }
  return out;
}

// transformers 5 module paths of LLaVA against the checkpoint names the builders use.
std::string checkpoint_name(std::string name) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"model.language_model.", "language_model.model."},
                                 {"model.vision_tower.", "vision_tower.vision_model."}}) {
    if (name.rfind(from, 0) == 0) return to + name.substr(from.size());
  }
  return name;
}

// The builder's checkpointable block names, in order.
std::vector<std::string> chain_names(const headroom::graph::LayerGraph& graph) {
  std::vector<std::string> out;
  for (const auto& block : graph.blocks) {
    if (block.checkpointable) out.push_back(block.name);
  }
  return out;
}

// Compares one trace file; prints one row per block; returns whether all agree.
bool check(const fs::path& trace_path) {
  const Trace trace = read_trace(trace_path);
  headroom::models::ZooOptions options;
  options.attention = trace.attention == "eager" ? headroom::models::AttentionImpl::kEager
                                                 : headroom::models::AttentionImpl::kSdpa;
  if (trace.image_px > 0) options.image_side = trace.image_px;  // Qwen2.5-VL's image
  if (trace.target_seq > 0) options.target_tokens = trace.target_seq;  // T5's decoder
  const fs::path config = trace_path.parent_path() / "config.json";
  auto model = headroom::models::load_hf_model(config.string(), options);
  if (!model.is_ok()) {
    std::printf("%-24s %-5s FAIL: %s\n", trace.family.c_str(), trace.attention.c_str(),
                model.status().message().c_str());
    return false;
  }
  const auto predicted =
      builder_keep(model.value().graph, trace.batch, trace.seq, std::getenv("HEADROOM_CROSSCHECK_VERBOSE") != nullptr);
  // Module paths can differ between transformers versions (v5 LLaVA:
  // model.language_model.layers.N, the checkpoints' language_model.model.layers.N):
  // when a name is unknown, the i-th checkpointable block of one side is paired
  // with the i-th of the other, if both chains have the same length.
  const std::vector<std::string> builder_chain = chain_names(model.value().graph);
  std::vector<std::string> traced_chain;
  for (const Trace::Block& block : trace.blocks) {
    if (block.checkpointable) traced_chain.push_back(block.name);
  }
  bool ok = true;
  for (const Trace::Block& block : trace.blocks) {
    if (!block.not_compared.empty()) {
      std::printf("%-24s %-5s %-36s %12s %12lld  (not compared: %s)\n", trace.family.c_str(),
                  trace.attention.c_str(), block.name.c_str(), "-",
                  static_cast<long long>(block.keep_bytes), block.not_compared.c_str());
      continue;
    }
    auto found = predicted.find(block.name);
    if (found == predicted.end()) found = predicted.find(checkpoint_name(block.name));
    if (found == predicted.end() && block.checkpointable && builder_chain.size() == traced_chain.size()) {
      const auto at = std::find(traced_chain.begin(), traced_chain.end(), block.name) - traced_chain.begin();
      found = predicted.find(builder_chain[static_cast<size_t>(at)]);
    }
    if (found == predicted.end()) {
      std::printf("%-24s %-5s %-36s %12s %12lld  %s\n", trace.family.c_str(),
                  trace.attention.c_str(), block.name.c_str(), "-",
                  static_cast<long long>(block.keep_bytes),
                  block.checkpointable ? "FAIL: no such block in the builder's graph" : "(info)");
      ok = ok && !block.checkpointable;
      continue;
    }
    const double error = block.keep_bytes == 0
                             ? (found->second == 0 ? 0.0 : 1.0)
                             : static_cast<double>(found->second - block.keep_bytes) /
                                   static_cast<double>(block.keep_bytes);
    const bool agrees = std::abs(error) <= kTolerance;
    std::printf("%-24s %-5s %-36s %12lld %12lld %+8.2f%%  %s\n", trace.family.c_str(),
                trace.attention.c_str(), block.name.c_str(),
                static_cast<long long>(found->second), static_cast<long long>(block.keep_bytes),
                100.0 * error, !block.checkpointable ? "(info)" : agrees ? "ok" : "FAIL");
    if (block.checkpointable && !agrees) ok = false;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: exporter_crosscheck DIR (written by scripts/exporter/crosscheck.py)\n");
    return 2;
  }
  std::vector<fs::path> traces;
  std::error_code ec;
  if (fs::is_directory(argv[1], ec)) {
    for (const auto& entry : fs::recursive_directory_iterator(argv[1], ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("trace_", 0) == 0 && entry.path().extension() == ".json") traces.push_back(entry.path());
    }
  }
  if (traces.empty()) {
    std::printf("exporter_crosscheck: no traces in %s (the exporter's Python packages are missing): skipped\n",
                argv[1]);
    return kSkip;
  }
  std::sort(traces.begin(), traces.end());
  std::printf("%-24s %-5s %-36s %12s %12s %9s\n", "family", "attn", "block", "builder B", "traced B",
              "error");
  bool ok = true;
  for (const fs::path& path : traces) {
    try {
      ok = check(path) && ok;
    } catch (const std::exception& e) {  // a malformed trace file
      std::printf("%s: FAIL: %s\n", path.string().c_str(), e.what());
      ok = false;
    }
  }
  std::printf("exporter_crosscheck: %s (tolerance %.0f%% per checkpointable block)\n",
              ok ? "all blocks agree" : "DISAGREEMENT", 100 * kTolerance);
  return ok ? 0 : 1;
}
