// How many checkpointed blocks' inputs torchtune's OffloadActivations keeps on the GPU
// in its forward stash. The stash is counted in packed tensors, not blocks: each pack
// takes the next tensor id, and packing a large tensor drops the stashed GPU copies
// whose id is max_fwd_stash_size (5) or more below its own (torchtune 0.6.1
// training/_activation_offloading.py pack_tensor). A non-reentrant checkpoint saves a
// dummy beside its inputs (torch 2.11 utils/checkpoint.py: `dummy = torch.empty((0,),
// requires_grad=True)`, `_NoopSaveInputs.apply(dummy, kwargs, *args)`), so a torchtune
// layer, whose one tensor argument is its input, packs two: the dummy and the input.
// The oracle (bench/oracle, env tt, torchtune[tt]/llama-3.2-1b/lora/b2s2048/offload)
// packs ids 2k+1 and 2k+2 for layer k. The step walk (step_model.cc) and the simulator
// (step_simulator_offload.cc) both read it.
#pragma once

namespace headroom::planner {

inline constexpr int kPacksPerCheckpointedBlock = 2;

// The blocks whose inputs are in the stash while a block's input is being packed: its
// own and the (stash - 1) / 2 latest before it.
inline constexpr int stashed_checkpoint_blocks(int stash) { return 1 + (stash - 1) / kPacksPerCheckpointedBlock; }

}  // namespace headroom::planner
