#include "planner/search/block_solver.h"

#include <algorithm>
#include <array>
#include <limits>

namespace headroom::planner {
namespace {

constexpr std::array<BlockChoice, 3> kChoices = {BlockChoice::kKeep, BlockChoice::kCheckpoint,
                                                 BlockChoice::kOffload};

struct Entry {
  int64_t stored = 0;   // P(k) in units: stored on the GPU by blocks 0..k
  double ms = 0;        // time of blocks 0..k
  int32_t parent = -1;  // index in the previous block's frontier of parent_choice
  uint8_t parent_choice = 0;
};

// Back pointers of one frontier, kept for every block to rebuild the plan.
struct Back {
  int32_t parent = -1;
  uint8_t parent_choice = 0;
};

using Frontier = std::array<std::vector<Entry>, 3>;

// Keeps the entries no other entry beats in both stored bytes and time.
void prune(std::vector<Entry>& entries) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.stored != b.stored) return a.stored < b.stored;
    return a.ms < b.ms;
  });
  size_t kept = 0;
  double best_ms = std::numeric_limits<double>::infinity();
  for (const Entry& entry : entries) {
    if (entry.ms < best_ms) {
      entries[kept++] = entry;
      best_ms = entry.ms;
    }
  }
  entries.resize(kept);
}

// The same as prune() in O(entries + units): one slot per stored-units value.
// `slots` is scratch of max_units + 1 entries, all -1 between calls.
void prune_buckets(std::vector<Entry>& entries, std::vector<int32_t>& slots, int64_t max_units) {
  if (slots.size() < static_cast<size_t>(max_units) + 1) slots.assign(max_units + 1, -1);
  int64_t lowest = max_units;
  int64_t highest = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const int64_t key = entries[i].stored;
    int32_t& slot = slots[key];
    // Strictly faster wins; on a tie the earlier entry stays, as in the stable sort.
    if (slot < 0 || entries[i].ms < entries[slot].ms) slot = static_cast<int32_t>(i);
    lowest = std::min(lowest, key);
    highest = std::max(highest, key);
  }
  std::vector<Entry> kept;
  double best_ms = std::numeric_limits<double>::infinity();
  for (int64_t key = lowest; key <= highest && !entries.empty(); ++key) {
    int32_t& slot = slots[key];
    if (slot < 0) continue;
    if (entries[slot].ms < best_ms) {
      kept.push_back(entries[slot]);
      best_ms = entries[slot].ms;
    }
    slot = -1;
  }
  entries.swap(kept);
}

constexpr int64_t kMaxBucketUnits = 1 << 22;

bool optimizer_step_fits(const StepModel& model, int64_t budget) {
  return model.base + model.grads_optimizer + model.optimizer_transient <= budget;
}

// GRPO's generation and log-prob pass (StepModel::generation) hold no activations of
// the step: whatever the blocks choose, they must fit on their own.
bool before_forward_fits(const StepModel& model, int64_t budget) {
  const int64_t held = model.base + model.gathered + model.grads_generation;
  return held + model.generation <= budget && held + model.logprob_pass <= budget;
}

constexpr int64_t kDefaultUnitBytes = 2LL << 20;
constexpr int64_t kMaxUnitsInRoom = 4096;

// The fastest entry of the last block whose stored units leave `room_left` for what
// runs after the forward (DPO's reference forward); ties go to fewer stored bytes.
std::pair<int, int> best_final(const Frontier& last, int64_t unit, int64_t room_left) {
  int best_choice = -1;
  int best_index = -1;
  for (size_t c = 0; c < last.size(); ++c) {
    for (size_t i = 0; i < last[c].size(); ++i) {
      const Entry& entry = last[c][i];
      if (entry.stored * unit > room_left) continue;
      const bool better = best_choice < 0 || entry.ms < last[best_choice][best_index].ms ||
                          (entry.ms == last[best_choice][best_index].ms &&
                           entry.stored < last[best_choice][best_index].stored);
      if (better) {
        best_choice = static_cast<int>(c);
        best_index = static_cast<int>(i);
      }
    }
  }
  return {best_choice, best_index};
}

// How the solver counts stored bytes: in units of `unit`, rounded up.
struct UnitScale {
  int64_t unit = 0;
  int64_t room = 0;       // allocator bytes left for stored activations and a block's local peak
  int64_t max_units = 0;  // a bound on stored units, for the bucket prune
  int64_t units(int64_t bytes) const { return (bytes + unit - 1) / unit; }
};

UnitScale unit_scale(const StepModel& model, int64_t room, const SolverOptions& options) {
  UnitScale scale;
  scale.room = room;
  scale.unit = options.unit_bytes > 0 ? options.unit_bytes
                                      : std::max(kDefaultUnitBytes, (room + kMaxUnitsInRoom - 1) / kMaxUnitsInRoom);
  // Stored units can exceed room/unit only by the last block's share; bound generously.
  scale.max_units = room / scale.unit + 1;
  for (const BlockProfile& block : model.blocks) {
    scale.max_units = std::max(scale.max_units, room / scale.unit + scale.units(block.keep) + 1);
  }
  return scale;
}

// Fills `into` with the frontier of block k under kChoices[c], grown from the
// previous block's frontiers and pruned. `buckets` is prune_buckets' scratch.
void grow_frontier(const StepModel& model, int k, size_t c, const Frontier& previous, const UnitScale& scale,
                   std::vector<int32_t>& buckets, std::vector<Entry>& into) {
  const BlockChoice choice = kChoices[c];
  into.clear();
  if (!choice_allowed(model, k, choice)) return;
  // A checkpointed block's cached weight casts, and what the forward's frame holds,
  // stay through the rest of the forward (walk_step); counting them as stored in
  // backward too keeps every plan sound.
  const int64_t cache =
      model.blocks[k].forward_frame + (choice == BlockChoice::kCheckpoint ? model.blocks[k].cast_cache : 0);
  const int64_t stored = scale.units(stored_bytes(model.blocks[k], choice) + cache);
  const double ms = block_ms(model, k, choice);
  if (k == 0) {
    if (local_peak(model, 0, BlockChoice::kKeep, choice) <= scale.room) into.push_back(Entry{stored, ms, -1, 0});
    return;
  }
  for (size_t p = 0; p < kChoices.size(); ++p) {
    const std::vector<Entry>& from = previous[p];
    if (from.empty()) continue;
    const int64_t local = local_peak(model, k, kChoices[p], choice);
    for (size_t i = 0; i < from.size(); ++i) {
      // `from` is sorted by stored bytes: once one is too big, all later are.
      if (from[i].stored * scale.unit + local > scale.room) break;
      into.push_back(Entry{from[i].stored + stored, from[i].ms + ms, static_cast<int32_t>(i),
                           static_cast<uint8_t>(p)});
    }
  }
  if (scale.max_units <= kMaxBucketUnits) {
    prune_buckets(into, buckets, scale.max_units);
  } else {
    prune(into);
  }
}

using Backs = std::vector<std::array<std::vector<Back>, 3>>;  // per block, per choice

// The choices of every block, following the back pointers from the last block's entry.
std::vector<BlockChoice> trace_back(const Backs& backs, int choice, int index) {
  const int n = static_cast<int>(backs.size());
  std::vector<BlockChoice> choices(n, BlockChoice::kKeep);
  for (int k = n - 1; k >= 0; --k) {
    const Back back = backs[k][choice][index];
    choices[k] = kChoices[choice];
    index = back.parent;
    choice = back.parent_choice;
  }
  return choices;
}

}  // namespace

BlockSolution solve_blocks(const StepModel& model, int64_t budget, const SolverOptions& options) {
  BlockSolution out;
  const int n = static_cast<int>(model.blocks.size());
  if (n == 0 || !optimizer_step_fits(model, budget) || !before_forward_fits(model, budget)) return out;
  const int64_t room = budget - model.base - model.gathered;
  if (room < 0) return out;
  const UnitScale scale = unit_scale(model, room, options);
  out.unit_bytes = scale.unit;
  std::vector<int32_t> buckets;

  Frontier previous;
  Frontier current;
  Backs backs(n);
  for (int k = 0; k < n; ++k) {
    for (size_t c = 0; c < kChoices.size(); ++c) {
      const std::vector<Entry>& into = current[c];
      grow_frontier(model, k, c, previous, scale, buckets, current[c]);
      backs[k][c].reserve(into.size());
      for (const Entry& entry : into) backs[k][c].push_back(Back{entry.parent, entry.parent_choice});
      out.frontier_entries += static_cast<int64_t>(into.size());
    }
    std::swap(previous, current);
  }

  const auto [choice, index] = best_final(previous, scale.unit, scale.room - reference_forward_local(model));
  if (choice < 0) return out;
  out.feasible = true;
  out.micro_step_ms = previous[choice][index].ms;
  out.choices = trace_back(backs, choice, index);
  out.peak = walk_step(model, out.choices, 0).bytes;
  return out;
}

BlockSolution best_pattern(const StepModel& model, int64_t budget,
                           const std::vector<std::vector<BlockChoice>>& patterns) {
  BlockSolution out;
  const int n = static_cast<int>(model.blocks.size());
  for (const std::vector<BlockChoice>& choices : patterns) {
    if (static_cast<int>(choices.size()) != n) continue;
    bool allowed = true;
    double ms = 0;
    for (int k = 0; k < n && allowed; ++k) {
      allowed = choices[k] == BlockChoice::kKeep || choice_allowed(model, k, choices[k]);
      ms += block_ms(model, k, choices[k]);
    }
    if (!allowed) continue;
    const int64_t peak = walk_step(model, choices, 0).bytes;
    if (peak > budget || (out.feasible && ms >= out.micro_step_ms)) continue;
    out.feasible = true;
    out.micro_step_ms = ms;
    out.choices = choices;
    out.peak = peak;
  }
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
