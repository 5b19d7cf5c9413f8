// BertForSequenceClassification and RobertaForSequenceClassification
// (transformers' modeling_bert.py, modeling_roberta.py) as a LibTorch module
// built from the planner's BertConfig (models::read_hf_bert), named like their
// parameters so a Hugging Face checkpoint loads and the planner's graph names
// every parameter: word, position and token-type embeddings with LayerNorm and
// dropout; post-LN encoder layers (SDPA over query/key/value with biases,
// exact-GELU MLP, dropout before each residual); BERT's pooler (dense + tanh
// on [CLS]) and classifier, or RoBERTa's classification head. The embeddings,
// each encoder layer and the head run through the BlockRunner under the
// graph's block names ("embeddings", "<prefix>.encoder.layer.N", "head").
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "models/torch/layers.h"
#include "models/zoo_builders.h"

namespace headroom::models::torch_modules {

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& hidden);
  BertConfig config;
  Linear query{nullptr}, key{nullptr}, value{nullptr}, attention_output{nullptr}, intermediate{nullptr}, output{nullptr};
  LayerNorm attention_norm{nullptr}, output_norm{nullptr};
};
TORCH_MODULE(BertLayer);

class BertForSequenceClassificationImpl : public torch::nn::Module {
 public:
  // `config`'s dropouts are the ones it runs (the plan's override applied by the caller).
  explicit BertForSequenceClassificationImpl(const BertConfig& config, const LoraOptions& lora = {});
  // Mean cross-entropy of input_ids and token_type_ids [B, S] (int64) against labels [B].
  torch::Tensor loss(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& labels,
                     const BlockRunner& runner);
  BertConfig config;
  torch::Tensor word_embeddings, position_embeddings, token_type_embeddings;
  LayerNorm embeddings_norm{nullptr};
  std::vector<BertLayer> layers;
  // BERT: pooler.dense and classifier; RoBERTa: classifier.dense and classifier.out_proj.
  Linear head_dense{nullptr}, head_out{nullptr};

 private:
  torch::Tensor embed(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids);
  torch::Tensor classify(const torch::Tensor& hidden);
  std::shared_ptr<torch::nn::Module> embeddings_;  // "<prefix>.embeddings": the embeddings block's parameters
  std::shared_ptr<torch::nn::Module> head_;        // unregistered: the head block's two linears
};
TORCH_MODULE(BertForSequenceClassification);

// PEFT's usual BERT targets (the planner's graph.lora_targets): the attention
// projections and every dense layer.
LoraOptions bert_lora(int64_t rank, double alpha = 16);

}  // namespace headroom::models::torch_modules
