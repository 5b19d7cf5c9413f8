// What a plan may change in the user's run (issue 36): each stack changes some
// things through its own config or flags and others only by editing the
// training script. `plan` searches the stack's own space by default
// (docs/stacks.md, "What a plan may change"); RunSettings::may_change widens or
// narrows it, and the older allow_* settings narrow it further.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "planner/settings/stack_choices.h"

namespace headroom::planner {

struct RunSettings;

// One thing a plan may change. The three checkpointing knobs are nested: per
// block covers every N-th block, which covers every block or none.
enum class Knob : unsigned {
  kCheckpointing = 1u << 0,      // every block or none (the Trainer's gradient_checkpointing)
  kCheckpointEvery = 1u << 1,    // every N-th block (torchtitan's selective_ac_option N)
  kCheckpointBlocks = 1u << 2,   // any set of blocks (headroom's torch export)
  kActivationOffload = 1u << 3,  // a block's saved activations in pinned host memory
  kMicroBatch = 1u << 4,         // micro-batch and accumulation, the global batch kept
  kZero = 1u << 5,               // the ZeRO (or FSDP sharding) stage
  kOffload = 1u << 6,            // optimizer and parameter offload to the CPU
  kNvme = 1u << 7,               // NVMe offload (ZeRO-Infinity), also needs allow_nvme_offload
};

// A set of knobs.
struct KnobSet {
  unsigned bits = 0;
  bool has(Knob knob) const { return (bits & static_cast<unsigned>(knob)) != 0; }
  void add(Knob knob) { bits |= static_cast<unsigned>(knob); }
};

// How finely the plan may choose the checkpointed blocks: the finest knob held.
enum class CheckpointGranularity { kAsGiven, kAllOrNone, kEveryNth, kPerBlock };
CheckpointGranularity checkpoint_granularity(KnobSet knobs);

// Every knob (may_change "all").
KnobSet all_knobs();

// What `stack` can change without editing the user's code.
KnobSet stack_knobs(Stack stack);

// The space a run's plan is searched in: `may_change` if given (names below,
// "stack" for the stack's own set, "all" for every knob), else the stack's.
// Refuses an unknown name with the field named.
Result<KnobSet> knobs_of(const RunSettings& settings, std::string_view origin);

// The knobs a run's plans may change: its may_change (else its stack's), less
// what the older allow_* settings and max_zero_stage rule out.
KnobSet knobs_for(const RunSettings& settings);

// The knob names `may_change` accepts, comma-separated, for messages and --help.
std::string knob_names();

// The knobs of `knobs` in words, for the answer ("gradient checkpointing of every
// block or none, micro-batch and accumulation, ...").
std::string knobs_in_words(KnobSet knobs);

}  // namespace headroom::planner
