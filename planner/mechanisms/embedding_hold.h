// Whether a decoder's forward holds its embedding's output to the final norm. Hugging
// Face's LlamaModel.forward binds `inputs_embeds` and keeps it until it returns after
// self.norm (transformers 5.23.0 and 4.44.2 modeling_llama.py; also Mistral, Qwen2,
// Qwen3, Phi-3, Gemma, Mixtral, Qwen2-MoE, OLMoE, Qwen3-MoE), as models/llama.cc
// builds it. torchtune's and litgpt's own decoders rebind one name through the layers
// instead. docs/memory-model.md, "Forward frames".
#pragma once

#include "graph/layer_graph.h"

namespace headroom::planner {

// torchtune 0.6.1 TransformerDecoder.forward (torchtune/modules/transformer.py) runs
// `h = self.tok_embeddings(tokens)`, `h = layer(h, ...)`, `h = self.norm(h)`; litgpt
// 0.5.13 GPT.forward (litgpt/model.py) the same with `x`: nothing holds the embedding's
// output once layer 0 has read it. Drops "model.norm"'s holds on what the embeddings'
// block made; a graph without that norm is left as it is.
void release_embedding_hold(graph::LayerGraph& graph);

}  // namespace headroom::planner
