// ZeRO-2's gradient partition as DeepSpeed 0.19.8 sizes it per rank: the whole numel
// of every parameter touching the rank's slice of its flattened group
// (stage_1_and_2.py get_partition_info, copy_grads_in_partition), the Trainer's
// decay and no-decay groups flattened apart. planner/memory/zero2_partition.h.
#include <doctest/doctest.h>

#include "planner/memory/model_states.h"
#include "planner/memory/zero2_partition.h"
#include "planner/settings/stack.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kM = 1 << 20;

graph::Node node_with(const std::string& name, int block, int64_t elements) {
  graph::Node node;
  node.name = name;
  node.op = "linear";
  node.block = block;
  node.params.push_back({name + ".weight", {elements}, graph::DType::kBF16, true, ""});
  return node;
}

// An embedding, a layer, a one-element norm, a second layer and a head, in
// forward order (the order of named_parameters for these decoders).
graph::LayerGraph model(int64_t embed, int64_t layer0, int64_t layer1, int64_t head) {
  graph::LayerGraph graph;
  graph.blocks = {{"embeddings", "embedding", false},
                  {"layers.0", "dense", true},
                  {"layers.1", "dense", true},
                  {"head", "lm_head", false}};
  graph.nodes = {node_with("embed_tokens", 0, embed), node_with("layers.0.mlp", 1, layer0),
                 node_with("layers.0.input_layernorm", 1, 1), node_with("layers.1.mlp", 2, layer1),
                 node_with("lm_head", 3, head)};
  return graph;
}

// 2M, 1M, 3M, 6M: the decay group is 12M, each of 4 ranks' slices 3M.
graph::LayerGraph uneven_model() { return model(2 * kM, kM, 3 * kM, 6 * kM); }

TEST_CASE("ZeRO-2's gradient partition is the largest rank's whole parameters, not 1/world") {
  // rank 0 [0, 3M): embedding and layers.0 (and the no-decay group's norm); rank 1:
  // layers.1; rank 2: the head starting in it; rank 3: the head crossing its start.
  // In the decay group the norm would shift layers.1 across rank 1's start and the
  // head into rank 1 (9M).
  CHECK(zero2_largest_grad_partition_elements(uneven_model(), 4) == 6 * kM);
  // A 10M embedding on two ranks: rank 1's slice [6M, 12M) starts inside it, so rank 1
  // holds it whole with the rest (get_partition_info: first_offset).
  const graph::LayerGraph big_embedding = model(10 * kM, kM / 2, kM / 2, kM);
  CHECK(zero2_largest_grad_partition_elements(big_embedding, 2) == 12 * kM);
  CHECK(zero2_largest_grad_partition_elements(big_embedding, 1) == 12 * kM + 1);
}

TEST_CASE("DeepSpeed's ZeRO-2 gradients are priced at the largest rank's partition") {
  RunSettings settings;
  settings.stack = Stack::kHfTrainer;
  settings.precision = Precision::kBf16Pure;
  settings.gpus_per_node = 4;
  settings.zero_stage = 2;
  const ModelStates states = model_states(uneven_model(), settings, zero_stage(2), Accounting::kAllocated);
  CHECK(states.grads_full == 6 * kM * 2);  // bf16, copy_grads_in_partition's torch.empty
  // Offloaded optimizer: gradients go to the host, no such buffer on the GPU.
  GlobalConfig offload = zero_stage(2);
  offload.offload_optimizer = Offload::kCpu;
  CHECK(model_states(uneven_model(), settings, offload, Accounting::kAllocated).grads_full == 0);
  // headroom's executor (the unspecified stack) keeps 1/world of each bucket
  // (executor/zero_layout.h): a quarter of the 12M elements (and the norm), rounded
  // once by the allocator, not the largest rank's 6M.
  settings.stack = Stack::kUnspecified;
  const ModelStates executor = model_states(uneven_model(), settings, zero_stage(2), Accounting::kAllocated);
  CHECK(executor.grads_full >= 3 * kM * 2);
  CHECK(executor.grads_full < 3 * kM * 2 + 1024);
}

}  // namespace
}  // namespace headroom::planner
