// The block solver is exact: on many random small chains it finds the same
// optimal time as trying every assignment, and its plan satisfies the walk.
#include <doctest/doctest.h>

#include <random>

#include "planner/search/block_solver.h"

namespace headroom::planner {
namespace {

StepModel random_model(std::mt19937_64& rng, int blocks) {
  std::uniform_int_distribution<int64_t> bytes(1, 1000);
  std::uniform_real_distribution<double> ms(0.1, 10.0);
  StepModel model;
  model.base = bytes(rng) * 3;
  model.gathered = std::uniform_int_distribution<int>(0, 1)(rng) ? bytes(rng) : 0;
  model.grads_fwd = 0;
  int64_t running = 0;
  model.grads_bwd.assign(blocks, 0);
  for (int k = 0; k < blocks; ++k) {
    BlockProfile block;
    block.keep = bytes(rng);
    block.checkpoint = std::min<int64_t>(block.keep, bytes(rng) / 4);
    block.fwd_peak = block.keep + bytes(rng) / 2;
    block.fwd_peak_nograd = block.checkpoint + bytes(rng) / 3;
    block.out_grad = bytes(rng) / 5;
    block.bwd_peak = block.keep + block.out_grad + bytes(rng) / 2;
    block.on_autograd = std::uniform_int_distribution<int>(0, 5)(rng) != 0;
    if (!block.on_autograd) {
      block.keep = block.checkpoint = block.bwd_peak = block.out_grad = 0;
    }
    block.checkpointable = k != 0 && k != blocks - 1 ? true : std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    block.fwd_ms = ms(rng);
    block.bwd_ms = 2 * block.fwd_ms;
    model.blocks.push_back(block);
    model.copy_ms.push_back(ms(rng));
  }
  for (int k = blocks - 1; k >= 0; --k) {
    running += bytes(rng) / 10;
    model.grads_bwd[k] = running;
  }
  model.grads_optimizer = running;
  model.allow_offload = std::uniform_int_distribution<int>(0, 3)(rng) != 0;
  return model;
}

}  // namespace

TEST_CASE("DP equals brute force on 400 random chains of 1 to 8 blocks") {
  std::mt19937_64 rng(20261122);
  int feasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int blocks = 1 + trial % 8;
    const StepModel model = random_model(rng, blocks);
    // Budgets from hopeless to generous, so every regime is exercised.
    const int64_t unconstrained = walk_step(model, std::vector<BlockChoice>(blocks, BlockChoice::kKeep), 0).bytes;
    const int64_t budget = std::uniform_int_distribution<int64_t>(unconstrained / 3, unconstrained + 100)(rng);
    const BlockSolution dp = solve_blocks(model, budget, SolverOptions{1});
    const BlockSolution brute = brute_force_blocks(model, budget);
    INFO("trial " << trial << " blocks " << blocks << " budget " << budget);
    REQUIRE(dp.feasible == brute.feasible);
    if (!dp.feasible) continue;
    ++feasible;
    CHECK(dp.micro_step_ms == doctest::Approx(brute.micro_step_ms).epsilon(1e-12));
    CHECK(walk_step(model, dp.choices, 0).bytes <= budget);
    double ms = 0;
    for (int k = 0; k < blocks; ++k) ms += block_ms(model, k, dp.choices[k]);
    CHECK(ms == doctest::Approx(dp.micro_step_ms).epsilon(1e-12));
  }
  CHECK(feasible > 100);  // the test must exercise feasible cases, not only refusals
}

TEST_CASE("with room for everything the solver keeps every block") {
  std::mt19937_64 rng(7);
  const StepModel model = random_model(rng, 6);
  const BlockSolution dp = solve_blocks(model, INT64_MAX / 4);
  REQUIRE(dp.feasible);
  for (int k = 0; k < 6; ++k) {
    if (model.blocks[k].on_autograd) CHECK(dp.choices[k] != BlockChoice::kCheckpoint);
  }
}

TEST_CASE("the walk's peak is at least every live set it passes through") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    const StepModel model = random_model(rng, 5);
    std::vector<BlockChoice> choices(5, BlockChoice::kKeep);
    const StepPeak peak = walk_step(model, choices, 0);
    int64_t stored = 0;
    for (int k = 0; k < 5; ++k) {
      CHECK(peak.bytes >= model.base + model.gathered + stored + model.blocks[k].fwd_peak);
      CHECK(peak.bytes >= model.base + model.gathered + stored + model.grads_bwd[k] + model.blocks[k].bwd_peak);
      stored += model.blocks[k].keep;
    }
    CHECK(peak.bytes >= model.base + model.grads_optimizer);
  }
}
TEST_CASE("best_pattern over every assignment equals brute force, and skips what a block cannot take") {
  std::mt19937_64 rng(20261129);
  for (int trial = 0; trial < 200; ++trial) {
    const int blocks = 1 + trial % 6;
    const StepModel model = random_model(rng, blocks);
    const int64_t unconstrained = walk_step(model, std::vector<BlockChoice>(blocks, BlockChoice::kKeep), 0).bytes;
    const int64_t budget = std::uniform_int_distribution<int64_t>(unconstrained / 3, unconstrained + 100)(rng);
    std::vector<std::vector<BlockChoice>> every;
    std::vector<int> digits(blocks, 0);
    while (true) {
      std::vector<BlockChoice> choices(blocks);
      for (int k = 0; k < blocks; ++k) choices[k] = static_cast<BlockChoice>(digits[k]);
      every.push_back(choices);
      int k = 0;
      while (k < blocks && ++digits[k] == 3) digits[k++] = 0;
      if (k == blocks) break;
    }
    const BlockSolution patterns = best_pattern(model, budget, every);
    const BlockSolution brute = brute_force_blocks(model, budget);
    INFO("trial " << trial);
    REQUIRE(patterns.feasible == brute.feasible);
    if (patterns.feasible) CHECK(patterns.micro_step_ms == doctest::Approx(brute.micro_step_ms).epsilon(1e-12));
  }
  // A pattern that offloads where the model allows no offload is never chosen.
  std::mt19937_64 one(3);
  StepModel model = random_model(one, 4);
  model.allow_offload = false;
  const BlockSolution none = best_pattern(model, INT64_MAX / 4, {std::vector<BlockChoice>(4, BlockChoice::kOffload)});
  CHECK_FALSE(none.feasible);
}

}  // namespace headroom::planner
