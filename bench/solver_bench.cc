// Solve time of the exact block solver on chains of 32, 128, 1024 and 4096
// blocks, and its speed-up over brute force where brute force is feasible.
// Blocks are Llama-3-8B decoder blocks at micro-batch 1, S = 4096 (bf16, SDPA)
// with +-20% random variation so that no two blocks are alike; the budget
// forces about half of them to be checkpointed or offloaded.
// Prints figures; targets: 128 blocks < 50 ms, 1024 blocks < 1 s (this machine).
#include <chrono>
#include <cstdio>
#include <random>

#include "planner/search/block_solver.h"

namespace {

using headroom::planner::BlockChoice;
using headroom::planner::BlockProfile;
using headroom::planner::StepModel;

StepModel chain(int blocks, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> vary(0.8, 1.2);
  const double mib = 1 << 20;
  StepModel model;
  model.base = static_cast<int64_t>(16.1e9);
  for (int k = 0; k < blocks; ++k) {
    const double v = vary(rng);
    BlockProfile block;
    block.keep = static_cast<int64_t>(400 * mib * v);  // ~ saved tensors of one decoder block
    block.checkpoint = static_cast<int64_t>(32 * mib * vary(rng));
    block.fwd_peak = block.keep + static_cast<int64_t>(112 * mib * vary(rng));
    block.fwd_peak_nograd = block.checkpoint + static_cast<int64_t>(112 * mib * vary(rng));
    block.out_grad = static_cast<int64_t>(32 * mib);
    block.bwd_peak = block.keep + static_cast<int64_t>(200 * mib * vary(rng));
    block.on_autograd = true;
    block.checkpointable = true;
    block.fwd_ms = 6.0 * vary(rng);
    block.bwd_ms = 2 * block.fwd_ms;
    model.blocks.push_back(block);
    model.copy_ms.push_back(static_cast<double>(block.keep) / 25e9 * 1e3 * vary(rng));
  }
  model.grads_bwd.assign(blocks, 0);
  return model;
}

int64_t half_budget(const StepModel& model) {
  int64_t keep_all = 0;
  int64_t checkpoint_all = 0;
  for (const BlockProfile& block : model.blocks) {
    keep_all += block.keep;
    checkpoint_all += block.checkpoint;
  }
  return model.base + (keep_all + checkpoint_all) / 2 + (1LL << 30);
}

template <typename F>
double time_ms(F&& f, int repeats) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) f();
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(end - start).count() / repeats;
}

}  // namespace

int main() {
  std::mt19937_64 rng(42);
  std::printf("exact block solver (DP over the chain, Pareto frontier per state)\n");
  std::printf("%8s %12s %16s %10s\n", "blocks", "solve_ms", "frontier_entries", "checkpointed");
  for (int blocks : {32, 128, 1024, 4096}) {
    const StepModel model = chain(blocks, rng);
    const int64_t budget = half_budget(model);
    headroom::planner::BlockSolution solution;
    const int repeats = blocks <= 128 ? 20 : 1;
    const double ms = time_ms([&] { solution = headroom::planner::solve_blocks(model, budget); }, repeats);
    int changed = 0;
    for (BlockChoice choice : solution.choices) changed += choice != BlockChoice::kKeep;
    std::printf("%8d %12.3f %16lld %10d%s\n", blocks, ms, static_cast<long long>(solution.frontier_entries),
                changed, solution.feasible ? "" : "  (infeasible)");
  }
  std::printf("\nspeed-up over brute force (3^n assignments), same instances\n");
  std::printf("%8s %12s %14s %10s %8s\n", "blocks", "dp_ms", "brute_ms", "speedup", "agree");
  for (int blocks : {6, 8, 10, 12}) {
    const StepModel model = chain(blocks, rng);
    const int64_t budget = half_budget(model);
    headroom::planner::BlockSolution dp;
    headroom::planner::BlockSolution brute;
    const double dp_ms = time_ms([&] { dp = headroom::planner::solve_blocks(model, budget); }, 200);
    const double brute_ms = time_ms([&] { brute = headroom::planner::brute_force_blocks(model, budget); }, 1);
    const bool agree = dp.feasible == brute.feasible && (!dp.feasible || std::abs(dp.micro_step_ms - brute.micro_step_ms) < 1e-9);
    std::printf("%8d %12.4f %14.2f %9.0fx %8s\n", blocks, dp_ms, brute_ms, brute_ms / dp_ms, agree ? "yes" : "NO");
  }
  return 0;
}
