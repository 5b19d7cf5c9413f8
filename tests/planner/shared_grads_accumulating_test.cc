// A tied weight's first partial held beside its `.grad` while micro-steps accumulate
// (planner/predict/shared_grads_accumulating.h; torch/csrc/autograd/input_buffer.cpp,
// functions/accumulate_grad.h). The oracle's optim2-accum rows: Llama-3.2-1B's tied
// 128256 x 2048 embedding, 0.49 GiB more at the embedding's backward.

#include <doctest/doctest.h>

#include <algorithm>

#include "models/zoo.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/model_states.h"
#include "planner/predict/shared_grads_accumulating.h"

namespace headroom::planner {

TEST_CASE("accumulating, a tied embedding's first partial is held from the head down to the embedding") {
  const graph::LayerGraph graph = models::build_zoo_model("gpt2", models::ZooOptions{}).value();
  int last_block = 0;
  for (const graph::Node& node : graph.nodes) last_block = std::max(last_block, node.block);
  const size_t n = static_cast<size_t>(last_block) + 1;
  RunSettings s;
  s.model = "gpt2";
  s.precision = Precision::kBf16Pure;
  GlobalConfig config;
  config.grad_accum = 4;
  const ModelStates states = model_states(graph, s, config, Accounting::kAllocated);
  const std::vector<int64_t> held = shared_grads_held_accumulating(graph, s, config, states, Accounting::kAllocated, n);
  const int64_t embedding = allocated_bytes(int64_t{50257} * 768 * 2);  // wte, bf16
  REQUIRE(held.size() == n);
  CHECK(held[0] == embedding);              // the embedding's own backward: buffer beside .grad
  CHECK(held[n / 2] == embedding);          // every block between
  CHECK(held[n - 1] == 0);                  // the head's block makes the partial at its end
  config.grad_accum = 1;                    // the buffer is the .grad to be
  const std::vector<int64_t> single = shared_grads_held_accumulating(graph, s, config, states, Accounting::kAllocated, n);
  CHECK(std::all_of(single.begin(), single.end(), [](int64_t b) { return b == 0; }));
}

}  // namespace headroom::planner
