// Where CLIPModel applies its visual projection. transformers 5.x projects the image
// inside get_image_features, right after the vision tower and before the text tower runs
// (modeling_clip.py 5.23.0: `vision_outputs.pooler_output = self.visual_projection(...)`);
// 4.x projected both towers' outputs after the text tower (modeling_clip.py 4.44.2,
// CLIPModel.forward). Autograd runs the ready node of the highest sequence number first
// (torch 2.11 torch/csrc/autograd/engine.h CompareNodeTaskTime), so under 5.x the visual
// projection runs backward only after the whole text tower: its weight's gradient is
// made then, and the projected image embeddings' gradient waits through the text tower's
// backward (the oracle's CLIP rows: no visual_projection gradient at a text-layer peak,
// and a [B, projection_dim] `add` live there).
#pragma once

#include "graph/layer_graph.h"

namespace headroom::planner {

// Moves CLIP's "visual_projection" node into the block of the vision tower's pooled
// output (its input's producer's block, "vision_head"): how transformers 5.x runs it.
// Returns whether it moved one (a graph without that node, SigLIP, is left alone).
bool apply_clip_projection_in_tower(graph::LayerGraph& graph);

}  // namespace headroom::planner
