// JSON form of LayerGraph (docs/layer-graph-format.md) and of SizeExpr.
// Reading is strict: a wrong type, a missing required field, an unknown key or
// an unknown name is an error naming the file and the field path, e.g.
//   model.json: nodes[2] ("fc1").params[0] ("fc1.weight").dtype: unknown dtype "f33"
//   (expected one of f32, f16, ...)
// and every graph read is checked with validate_graph().
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "graph/json_text.h"  // parse_json_text, for the readers of every format
#include "graph/layer_graph.h"
#include "graph/size_expr.h"
#include "graph/status.h"

namespace headroom::graph {

inline constexpr std::string_view kLayerGraphFormatName = "headroom.layer_graph";
// The largest graph file read (a limit against hostile files).
inline constexpr int64_t kMaxGraphFileBytes = int64_t{256} << 20;

// {"c":..,"b":..,"s":..,"bs":..,"ss":..,"bss":..} without zero terms, or a plain
// integer when the expression is a constant (0 included).
nlohmann::json size_expr_to_json(const SizeExpr& expr);
// Accepts that object form (every key optional) or a plain integer; coefficients
// are non-negative integers. `field_path` starts the error message.
Result<SizeExpr> size_expr_from_json(const nlohmann::json& json, std::string_view field_path);

// Lossless: graph_from_json(graph_to_json(g)) equals g for any valid g.
nlohmann::json graph_to_json(const LayerGraph& graph);
// `origin` (a file name) starts every error message.
Result<LayerGraph> graph_from_json(const nlohmann::json& json, std::string_view origin);

// Reads, parses and validates a graph file of at most kMaxGraphFileBytes.
Result<LayerGraph> load_graph_file(const std::string& path);
// Validates, then writes the graph atomically (two-space indented, trailing newline).
Status save_graph_file(const LayerGraph& graph, const std::string& path);

// Field-by-field equality (LayerGraph has no operator==).
bool graphs_equal(const LayerGraph& a, const LayerGraph& b);

}  // namespace headroom::graph
