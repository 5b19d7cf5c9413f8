// TRL's SFTTrainer from 1.15 computes its loss through a fused LM head
// (trl/trainer/utils.py add_fused_lm_head, trl/kernels/chunked_logprob.py
// ChunkedLogProbFunction, TRL 1.16.0): the [B*S, V] logits never exist. The
// forward copies the hidden states of the positions with a label
// (`hidden_states[mask]`) and folds [4096 tokens x 32768 vocabulary] tiles of
// their projection into per-token statistics; it saves the copy and two fp32
// values a token (log-sum-exp, entropy). The backward recomputes each tile and
// accumulates fp32 gradients of the hidden states (and of the head's weight when
// it trains), cast to the parameters' dtype at the end. docs/stacks.md, "The loss".
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "graph/dtype.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

// The fused head's op name. Its weight gradient is a fresh tensor (an fp32
// accumulator cast to the weight's dtype), not a view: a tied embedding's partial
// adds into it in place (time/backward_gradients.cc).
inline constexpr std::string_view kTrlFusedLogprobOp = "trl_fused_logprob";
inline constexpr int64_t kTrlTokenTile = 4096;   // chunked_logprob.py TOKEN_CHUNK_SIZE
inline constexpr int64_t kTrlVocabTile = 32768;  // utils.py _CHUNKED_LOGPROB_CHUNK_SIZE, even for V < 32768
// Forward scratch a token besides the tile: ChunkedLogProbFunction's seven fp32
// statistics (running_max, sum_exp, x_sum_exp, sq_sum_exp, z_sum, max_before_target,
// target_logit), the compact labels (int64) and CUDA's nonzero index rows (2 x int64).
inline constexpr int64_t kTrlForwardBytesPerToken = 7 * 4 + 8 + 2 * 8;
// Saved a token beside the hidden copy: log_z and entropy (fp32).
inline constexpr int64_t kTrlSavedBytesPerToken = 2 * 4;

// The tile's rows at `tokens` labelled positions: min(tokens, 4096).
int64_t trl_tile_rows(int64_t tokens);

// Rewrites the causal-LM loss (head linear -> fp32 upcast -> loss) into TRL's fused
// head, its tile sized at the run's `micro_batch` x `seq` tokens. `scored_per_row`: the
// labelled positions of a row when not every one is (GRPO labels the completion only,
// grpo_trainer.py _get_per_token_logps_and_entropies: -100 before the last
// logits_to_keep, so the compact copy holds micro_batch x completion rows). Returns
// whether a loss was rewritten (graphs without one, encoders and diffusion models, are left).
bool apply_trl_fused_head(graph::LayerGraph& graph, int64_t micro_batch, int64_t seq, graph::DType compute,
                          std::optional<int64_t> scored_per_row = std::nullopt);

}  // namespace headroom::planner
