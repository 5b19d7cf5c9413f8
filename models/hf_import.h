// Hugging Face models as users have them: a config.json, or a model directory
// with config.json and optionally *.safetensors / model.safetensors.index.json.
// The config is turned into a LayerGraph with the zoo's builders; the
// safetensors headers, when present, are compared with the graph's parameters
// (names, shapes) without reading any weight. docs/ingest.md.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/safetensors_header.h"
#include "graph/status.h"
#include "models/hf_quantization.h"
#include "models/zoo.h"

namespace headroom::models {

// The model_type values understood, for messages and docs.
std::string_view supported_hf_model_types();

// Whether config.json's model_type `type` is read as a mixture of experts
// (models/hf_moe_families.cc, models/hf_deepseek.cc).
bool is_moe_model_type(const std::string& type);

Result<graph::LayerGraph> graph_from_hf_config(const nlohmann::json& config,
                                               std::string_view origin, const ZooOptions& options);

struct HfModel {
  graph::LayerGraph graph;
  std::string config_path;                     // the config.json read
  std::optional<HfQuantization> quantization;  // its quantization_config, when it has one
  int checkpoint_tensors = 0;           // tensors in the safetensors headers (0: none found)
  std::vector<std::string> mismatches;  // graph vs checkpoint: missing, extra, shape
};

// Compares the graph's parameters with a checkpoint's tensors and returns one
// line per mismatch ("missing from the checkpoint: ...", "in the checkpoint
// only: ...", "shape differs: ..."): a report, not an error, since names vary
// across transformers versions. A name matches with or without its first
// component ("model.", "bert."). Matched parameters take the checkpoint's dtype;
// bitsandbytes 4-bit weights (with a ".quant_state.bitsandbytes__nf4" tensor)
// become NF4/FP4 and their quantization state is not reported.
std::vector<std::string> check_graph_against_safetensors(
    graph::LayerGraph& graph, const std::vector<graph::SafetensorsEntry>& tensors);

// `path`: a config.json file or a directory holding one.
Result<HfModel> load_hf_model(const std::string& path, const ZooOptions& options);

// Whether `path` looks like a Hugging Face model (a directory, or a file named config.json).
bool is_hf_model_path(const std::string& path);

}  // namespace headroom::models
