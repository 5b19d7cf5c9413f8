// Accelerate's prepared forward under native mixed precision: prepare_model wraps
// model.forward in autocast and then in convert_outputs_to_fp32 (accelerate 1.15.0
// accelerator.py prepare_model; utils/operations.py convert_to_fp32), which copies
// every fp16/bf16 tensor the forward returns to fp32 (`tensor.float()`) while the
// returned object still holds the 16-bit originals. The Trainer's compute_loss keeps
// only the loss (transformers 5.23.0 trainer.py), so the copies and the originals die
// when the forward returns: a moment at the forward's end, not in backward. For
// T5ForConditionalGeneration the oracle's peak is there (the fp32 logits and the fp32
// encoder_last_hidden_state beside their 16-bit originals; docs/stacks.md, "Accelerate's
// fp32 outputs").
#pragma once

#include "graph/dtype.h"
#include "graph/layer_graph.h"
#include "planner/settings/run_settings.h"
#include "planner/settings/stack_spec.h"

namespace headroom::planner {

// Whether Accelerate's prepare_model wraps the forward for native mixed precision
// (accelerator.py 1.15.0: `if self.native_amp`, autocast, then convert_outputs_to_fp32):
// the Trainer's forward in 16 bits under autocast (`top.autocast`: not under DeepSpeed's
// engine, where Accelerate leaves the module to it); the unspecified stack at the top of
// its band, which it prices under autocast.
bool accelerate_copies_outputs(const RunSettings& settings, const StackSpec& top);

// Gives every model_output node (graph::op::kModelOutput) an fp32 copy of each
// tensor it holds whose dtype is 16-bit (an unset dtype is `compute`'s), made and
// dropped at that node. `compute`: the run's compute dtype; fp32 copies nothing.
// Returns how many copies it added.
int apply_output_fp32_copies(graph::LayerGraph& graph, graph::DType compute);

}  // namespace headroom::planner
