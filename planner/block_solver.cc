#include "planner/block_solver.h"

#include <algorithm>
#include <array>
#include <limits>

namespace headroom::planner {
namespace {

constexpr std::array<BlockChoice, 3> kChoices = {BlockChoice::kKeep, BlockChoice::kCheckpoint,
                                                 BlockChoice::kOffload};

struct Entry {
  int64_t stored = 0;   // P(k): bytes stored on the GPU by blocks 0..k
  double ms = 0;        // time of blocks 0..k
  int32_t parent = -1;  // index in the previous block's frontier of parent_choice
  uint8_t parent_choice = 0;
};

using Frontier = std::array<std::vector<Entry>, 3>;

// Keeps the entries no other entry beats in both stored bytes and time.
void prune(std::vector<Entry>& entries) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.stored != b.stored) return a.stored < b.stored;
    return a.ms < b.ms;
  });
  std::vector<Entry> kept;
  double best_ms = std::numeric_limits<double>::infinity();
  for (const Entry& entry : entries) {
    if (entry.ms < best_ms) {
      kept.push_back(entry);
      best_ms = entry.ms;
    }
  }
  entries.swap(kept);
}

int64_t fixed_bytes(const StepModel& model) { return model.base + model.gathered; }

bool optimizer_step_fits(const StepModel& model, int64_t budget) {
  return model.base + model.grads_optimizer + model.optimizer_transient <= budget;
}

}  // namespace

BlockSolution solve_blocks(const StepModel& model, int64_t budget) {
  BlockSolution out;
  const int n = static_cast<int>(model.blocks.size());
  if (n == 0 || !optimizer_step_fits(model, budget)) return out;
  const int64_t fixed = fixed_bytes(model);
  std::vector<Frontier> steps(n);

  for (int k = 0; k < n; ++k) {
    for (size_t c = 0; c < kChoices.size(); ++c) {
      const BlockChoice choice = kChoices[c];
      if (!choice_allowed(model, k, choice)) continue;
      const int64_t stored = stored_bytes(model.blocks[k], choice);
      const double ms = block_ms(model, k, choice);
      std::vector<Entry>& into = steps[k][c];
      if (k == 0) {
        if (fixed + local_peak(model, 0, BlockChoice::kKeep, choice) <= budget) {
          into.push_back(Entry{stored, ms, -1, 0});
        }
        continue;
      }
      for (size_t p = 0; p < kChoices.size(); ++p) {
        const std::vector<Entry>& previous = steps[k - 1][p];
        if (previous.empty()) continue;
        const int64_t local = local_peak(model, k, kChoices[p], choice);
        for (size_t i = 0; i < previous.size(); ++i) {
          // previous is sorted by stored bytes: once one is too big, all later are.
          if (fixed + previous[i].stored + local > budget) break;
          into.push_back(Entry{previous[i].stored + stored, previous[i].ms + ms,
                               static_cast<int32_t>(i), static_cast<uint8_t>(p)});
        }
      }
      prune(into);
      out.frontier_entries += static_cast<int64_t>(into.size());
    }
  }

  // The fastest complete assignment; ties go to fewer stored bytes.
  int best_choice = -1;
  int best_index = -1;
  for (size_t c = 0; c < kChoices.size(); ++c) {
    const std::vector<Entry>& last = steps[n - 1][c];
    for (size_t i = 0; i < last.size(); ++i) {
      if (best_choice < 0) {
        best_choice = static_cast<int>(c);
        best_index = static_cast<int>(i);
        continue;
      }
      const Entry& best = steps[n - 1][best_choice][best_index];
      if (last[i].ms < best.ms || (last[i].ms == best.ms && last[i].stored < best.stored)) {
        best_choice = static_cast<int>(c);
        best_index = static_cast<int>(i);
      }
    }
  }
  if (best_choice < 0) return out;
  out.feasible = true;
  out.micro_step_ms = steps[n - 1][best_choice][best_index].ms;
  out.choices.assign(n, BlockChoice::kKeep);
  for (int k = n - 1; k >= 0; --k) {
    const Entry& entry = steps[k][best_choice][best_index];
    out.choices[k] = kChoices[best_choice];
    best_index = entry.parent;
    best_choice = entry.parent_choice;
  }
  out.peak = walk_step(model, out.choices, 0).bytes;
  return out;
}

BlockSolution brute_force_blocks(const StepModel& model, int64_t budget) {
  BlockSolution out;
  const int n = static_cast<int>(model.blocks.size());
  std::vector<int> digits(n, 0);
  std::vector<BlockChoice> choices(n);
  while (true) {
    bool allowed = true;
    for (int k = 0; k < n; ++k) {
      choices[k] = kChoices[digits[k]];
      allowed = allowed && choice_allowed(model, k, choices[k]);
    }
    if (allowed) {
      const int64_t peak = walk_step(model, choices, 0).bytes;
      if (peak <= budget) {
        double ms = 0;
        for (int k = 0; k < n; ++k) ms += block_ms(model, k, choices[k]);
        if (!out.feasible || ms < out.micro_step_ms) {
          out.feasible = true;
          out.micro_step_ms = ms;
          out.choices = choices;
          out.peak = peak;
        }
      }
    }
    int k = 0;
    while (k < n && ++digits[k] == 3) digits[k++] = 0;
    if (k == n) break;
  }
  return out;
}

}  // namespace headroom::planner
