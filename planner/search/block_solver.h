// The exact per-block solver: which blocks keep their activations, which are
// checkpointed and which offload them to host memory, so that one micro-step is
// fastest while the walk of step_model.h stays within the budget at every block.
//
// Dynamic programming over the block chain. The constraint at block k depends on
// the bytes stored by earlier blocks P(k-1), on the choice at k and on the choice
// at k-1 (an offloaded neighbour's copy in flight); the objective is a sum over
// blocks. So the state after block k is (P(k), choice at k), and for each choice
// we keep the Pareto frontier of (P(k), time): an entry with more stored bytes and
// no less time can never lead to a better plan.
//
// Choosing what to keep under a memory cap contains 0/1 knapsack, so an exact
// polynomial algorithm over arbitrary byte counts is not to be had; the frontier
// of exact byte sums can grow exponentially. The solver therefore counts stored
// bytes in units (rounded up, so every plan it returns fits with the real
// sizes) and is exact for the rounded sizes: the frontier never holds more than
// one entry per unit of budget. The default unit is 2 MiB (the caching
// allocator's rounding of large blocks) or 1/4096 of the room left, whichever is
// larger. Tests compare it with brute force at a unit of one byte.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/predict/step_model.h"

namespace headroom::planner {

struct BlockSolution {
  bool feasible = false;
  std::vector<BlockChoice> choices;
  double micro_step_ms = 0;  // sum of block_ms over the chain
  int64_t peak = 0;          // walk_step peak of the solution (allocator bytes)
  int64_t frontier_entries = 0;  // DP work, for the benchmark
  int64_t unit_bytes = 0;        // the unit stored bytes were counted in
};

struct SolverOptions {
  int64_t unit_bytes = 0;  // 0: max(2 MiB, room / 4096)
};

// `budget` bounds the allocator bytes (the CUDA context is outside it).
BlockSolution solve_blocks(const StepModel& model, int64_t budget, const SolverOptions& options = {});

// The fastest of `patterns` (each a choice for every block) whose walk stays
// within `budget`: for stacks that checkpoint every block or none, or every N-th
// (planner/settings/may_change.h). Patterns with a choice a block cannot take are skipped.
BlockSolution best_pattern(const StepModel& model, int64_t budget,
                           const std::vector<std::vector<BlockChoice>>& patterns);

// Every assignment; for tests and the benchmark only (3^n).
BlockSolution brute_force_blocks(const StepModel& model, int64_t budget);

}  // namespace headroom::planner
