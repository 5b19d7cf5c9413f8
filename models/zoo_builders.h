// Builders of the zoo's graphs, one per model file; zoo.cc adds the metadata
// (name, description, source, sequence spec, LoRA targets). Internal to models/.
#pragma once

#include "graph/layer_graph.h"
#include "models/zoo.h"

namespace headroom::models {

graph::LayerGraph build_gpt2(const ZooOptions& options);
graph::LayerGraph build_flux_kontext(const ZooOptions& options);
graph::LayerGraph build_vit_b16(const ZooOptions& options);
graph::LayerGraph build_eva_vit_g(const ZooOptions& options);
graph::LayerGraph build_llava_llama3_8b(const ZooOptions& options);
graph::LayerGraph build_bert_large(const ZooOptions& options);
// Not in the zoo: the LLaVA vision tower alone, for parameter-count tests.
graph::LayerGraph build_clip_vit_l14_336_vision(const ZooOptions& options);

}  // namespace headroom::models
