#include "models/torch/bert_module.h"

#include <string>

namespace headroom::models::torch_modules {
namespace {

namespace F = torch::nn::functional;

// nn.Dropout in training. native_dropout keeps a bool mask for backward on
// every device, as the planner's dropout nodes count (LibTorch's generic CPU
// dropout would keep a mask in the compute dtype; CUDA's is native_dropout).
torch::Tensor train_dropout(const torch::Tensor& x, double p, bool training) {
  return p > 0 && training ? std::get<0>(at::native_dropout(x, p, true)) : x;
}

// nn.Embedding's weight, normal(0, initializer_range 0.02) as
// BertPreTrainedModel._init_weights draws it, the padding row zeroed.
torch::Tensor embedding_weight(int64_t rows, int64_t width, int64_t padding_row) {
  torch::Tensor w = torch::randn({rows, width}) * 0.02;
  if (padding_row >= 0) w[padding_row].zero_();
  return w;
}

}  // namespace

BertLayerImpl::BertLayerImpl(const BertConfig& c) : config(c) {
  auto attention = named_scope(*this, "attention");
  auto self = named_scope(*attention, "self");
  query = self->register_module("query", Linear(c.hidden, c.hidden, true));
  key = self->register_module("key", Linear(c.hidden, c.hidden, true));
  value = self->register_module("value", Linear(c.hidden, c.hidden, true));
  auto attention_out = named_scope(*attention, "output");
  attention_output = attention_out->register_module("dense", Linear(c.hidden, c.hidden, true));
  attention_norm = attention_out->register_module("LayerNorm", layer_norm(c.hidden, c.layer_norm_eps));
  intermediate = named_scope(*this, "intermediate")->register_module("dense", Linear(c.hidden, c.intermediate, true));
  auto out = named_scope(*this, "output");
  output = out->register_module("dense", Linear(c.intermediate, c.hidden, true));
  output_norm = out->register_module("LayerNorm", layer_norm(c.hidden, c.layer_norm_eps));
}

// BertLayer with the SDPA attention (sdpa_attention_forward): BertSelfOutput
// and BertOutput are dense, dropout, LayerNorm(x + residual) (post-LN).
torch::Tensor BertLayerImpl::forward(const torch::Tensor& hidden) {
  // q, k, v in this order (argument order is unspecified; LoRA dropout draws in it).
  const torch::Tensor q = query(hidden);
  const torch::Tensor k = key(hidden);
  const torch::Tensor v = value(hidden);
  const double attention_p = is_training() ? config.attention_dropout : 0.0;
  const torch::Tensor attn = attention_output(encoder_attention(q, k, v, config.heads, attention_p));
  const torch::Tensor h = attention_norm(train_dropout(attn, config.hidden_dropout, is_training()) + hidden);
  const torch::Tensor down = output(F::gelu(intermediate(h)));
  return output_norm(train_dropout(down, config.hidden_dropout, is_training()) + h);
}

BertForSequenceClassificationImpl::BertForSequenceClassificationImpl(const BertConfig& c, const LoraOptions& lora)
    : config(c) {
  auto model = named_scope(*this, c.prefix);
  embeddings_ = named_scope(*model, "embeddings");
  word_embeddings = named_scope(*embeddings_, "word_embeddings")
                        ->register_parameter("weight", embedding_weight(c.vocab, c.hidden, c.pad_token));
  // RobertaEmbeddings gives the position table padding_idx too.
  position_embeddings =
      named_scope(*embeddings_, "position_embeddings")
          ->register_parameter("weight", embedding_weight(c.positions, c.hidden, c.roberta_head ? c.pad_token : -1));
  token_type_embeddings = named_scope(*embeddings_, "token_type_embeddings")
                              ->register_parameter("weight", embedding_weight(c.token_types, c.hidden, -1));
  embeddings_norm = embeddings_->register_module("LayerNorm", layer_norm(c.hidden, c.layer_norm_eps));
  auto layer_list = named_scope(*named_scope(*model, "encoder"), "layer");
  for (int64_t i = 0; i < c.layers; ++i) layers.push_back(layer_list->register_module(std::to_string(i), BertLayer(c)));
  head_ = std::make_shared<torch::nn::Module>();
  if (c.roberta_head) {
    // RobertaClassificationHead: classifier.dense, classifier.out_proj.
    auto classifier = named_scope(*this, "classifier");
    head_dense = classifier->register_module("dense", Linear(c.hidden, c.hidden, true));
    head_out = classifier->register_module("out_proj", Linear(c.hidden, c.labels, true));
  } else {
    // BertPooler (bert.pooler.dense) and BertForSequenceClassification.classifier.
    head_dense = named_scope(*model, "pooler")->register_module("dense", Linear(c.hidden, c.hidden, true));
    head_out = register_module("classifier", Linear(c.hidden, c.labels, true));
  }
  head_->register_module("dense", head_dense);
  head_->register_module("out", head_out);
  add_lora_adapters(*this, lora);
}

// BertEmbeddings / RobertaEmbeddings: words + token types, + positions,
// LayerNorm, dropout. BERT's positions are arange(S) (its position_ids buffer,
// one row for the batch); RoBERTa's count the non-padding tokens from
// padding_idx + 1 (create_position_ids_from_input_ids), one row per sample.
torch::Tensor BertForSequenceClassificationImpl::embed(const torch::Tensor& input_ids,
                                                       const torch::Tensor& token_type_ids) {
  const int64_t seq = input_ids.size(1);
  torch::Tensor positions;
  if (config.roberta_head) {
    const torch::Tensor mask = input_ids.ne(config.pad_token).to(torch::kInt);
    positions = (torch::cumsum(mask, 1).to(torch::kInt) * mask).to(torch::kLong) + config.pad_token;
  } else {
    positions = torch::arange(seq, input_ids.options()).unsqueeze(0);
  }
  const torch::Tensor words = F::embedding(input_ids, word_embeddings, F::EmbeddingFuncOptions().padding_idx(config.pad_token));
  const torch::Tensor sum = words + F::embedding(token_type_ids, token_type_embeddings);
  F::EmbeddingFuncOptions position_options;
  if (config.roberta_head) position_options.padding_idx(config.pad_token);
  const torch::Tensor all = sum + F::embedding(positions, position_embeddings, position_options);
  return train_dropout(embeddings_norm(all), config.hidden_dropout, is_training());
}

// The [CLS] token is a view of the last layer's output (hidden_states[:, 0]).
// BERT: pooler dense and tanh, dropout (classifier_dropout, else
// hidden_dropout_prob), classifier. RoBERTa: dropout, dense, tanh, dropout, out_proj.
torch::Tensor BertForSequenceClassificationImpl::classify(const torch::Tensor& hidden) {
  const torch::Tensor cls = hidden.select(1, 0);
  const double p = config.classifier_dropout;
  if (config.roberta_head) {
    const torch::Tensor x = torch::tanh(head_dense(train_dropout(cls, p, is_training())));
    return head_out(train_dropout(x, p, is_training()));
  }
  return head_out(train_dropout(torch::tanh(head_dense(cls)), p, is_training()));
}

torch::Tensor BertForSequenceClassificationImpl::loss(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                                      const torch::Tensor& labels, const BlockRunner& runner) {
  const std::string prefix = config.prefix;
  auto self = this;
  torch::Tensor hidden = run_block(runner, "embeddings", *embeddings_, [self](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{self->embed(in[0], in[1])};
  }, {input_ids, token_type_ids})[0];
  hidden = run_encoder_layers(runner, prefix + ".encoder.layer.", layers, hidden);
  const torch::Tensor logits = run_block(runner, "head", *head_, [self](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{self->classify(in[0])};
  }, {hidden})[0];
  // num_labels > 1 with integer labels: single_label_classification, CrossEntropyLoss.
  return F::cross_entropy(logits, labels);
}

LoraOptions bert_lora(int64_t rank, double alpha) {
  LoraOptions lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.targets = {"query", "key", "value", "dense"};
  return lora;
}

}  // namespace headroom::models::torch_modules
