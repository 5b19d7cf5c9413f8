// MODEL's layer graph as the models library builds it, kept for the process.
// A search prepares one context per candidate plan, and each preparation built the
// model again: one `fit` of Mixtral-8x7B that did not fit prepared 184 contexts,
// and under transformers 4.x (each expert its own modules: tens of thousands of
// nodes for Qwen3-30B-A3B) the builds were a large share of its time. A graph is a
// function of MODEL, the ZooOptions and, for a file or directory, the files read;
// those are fingerprinted (name, size, modification time of the path and of every
// file beside it), so a kept graph is the one a new build would make.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "models/hf_quantization.h"
#include "models/zoo.h"

namespace headroom::planner {

struct LoadedModel {
  graph::LayerGraph graph;
  // A Hugging Face directory or config.json only: the config read, its stored
  // quantization, and the graph-against-checkpoint mismatches.
  bool from_hf = false;
  std::string config_path;
  std::optional<models::HfQuantization> quantization;
  std::vector<std::string> mismatches;
};

// MODEL as a Hugging Face directory or config.json, a layer-graph file, a
// torchtune component or a zoo name (`as_path`: MODEL names a file or directory).
Result<LoadedModel> load_model(const std::string& model, bool as_path, const models::ZooOptions& options);

}  // namespace headroom::planner
