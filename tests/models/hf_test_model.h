// Test helper: a model from tests/data/hf/ read through load_hf_model, as
// `headroom fit tests/data/hf/NAME` reads it. One copy for every tests/models
// file that builds a graph from a stored config.json.
#pragma once

#include <string>

#include <doctest/doctest.h>

#include "graph/layer_graph.h"
#include "models/hf_import.h"
#include "models/zoo.h"

namespace headroom::models::testing {

// tests/data/hf/, where each model is a folder holding its config.json.
inline std::string hf_data_dir() { return std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/"; }

// The graph of tests/data/hf/NAME under `options`; a refused config fails the test with its message.
inline graph::LayerGraph load_test_model(const std::string& name, const ZooOptions& options = {}) {
  Result<HfModel> model = load_hf_model(hf_data_dir() + name, options);
  REQUIRE_MESSAGE(model.is_ok(), model.message());
  return model->graph;
}

}  // namespace headroom::models::testing
