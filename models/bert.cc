// BERT-large uncased with a sequence-classification head (HF
// BertForSequenceClassification): post-LayerNorm encoder layers, exact GELU,
// dropout 0.1 on attention probabilities and hidden states.
#include <string>

#include "models/layers.h"
#include "models/zoo_builders.h"

namespace headroom::models {
namespace {

// google-bert/bert-large-uncased config.json: hidden_size 1024,
// num_hidden_layers 24, num_attention_heads 16, intermediate_size 4096,
// vocab_size 30522, max_position_embeddings 512, type_vocab_size 2,
// hidden_dropout_prob 0.1, attention_probs_dropout_prob 0.1. Head: pooler
// (dense + tanh on [CLS]) and classifier for num_labels 2 (the HF default).
// BertConfig's defaults (models/zoo_builders.h, kBertLargeUncased).

std::string bert_layer(GraphBuilder& b, const BertConfig& c, int64_t i, const std::string& hidden,
                       const ZooOptions& options) {
  const std::string p = std::string(c.prefix) + ".encoder.layer." + std::to_string(i);
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  const double hidden_p = dropout_p(options, c.hidden_dropout);
  b.begin_block(p, "bert_layer", true);
  const std::string q = b.linear(p + ".attention.self.query", hidden, rows, c.hidden, c.hidden, true);
  const std::string k = b.linear(p + ".attention.self.key", hidden, rows, c.hidden, c.hidden, true);
  const std::string v = b.linear(p + ".attention.self.value", hidden, rows, c.hidden, c.hidden, true);
  const AttentionShape shape =
      self_attention_shape(c.heads, c.heads, c.hidden / c.heads, rows, square_tokens(), false);
  std::string attn = attention(b, options.attention, p + ".attention.self", q, k, v, shape,
                               EagerAttentionOptions{false, dropout_p(options, c.attention_dropout)});
  if (options.attention == AttentionImpl::kEager) {
    attn = b.copy(p + ".attention.self.merge_heads", "transpose_contiguous", {attn}, h_elements);
  }
  std::string o = b.linear(p + ".attention.output.dense", attn, rows, c.hidden, c.hidden, true);
  o = b.dropout(p + ".attention.output.dropout", o, h_elements, hidden_p);
  const std::string sum1 = b.add(p + ".attention.output.residual", o, hidden, h_elements);
  const std::string h = b.norm(p + ".attention.output.LayerNorm", sum1, rows, c.hidden,
                               NormKind::kLayerNorm, true, true);
  const std::string up = b.linear(p + ".intermediate.dense", h, rows, c.hidden, c.intermediate, true);
  const std::string act = b.activation(p + ".intermediate.intermediate_act_fn", up,
                                       times(rows, c.intermediate), "gelu");
  std::string down = b.linear(p + ".output.dense", act, rows, c.intermediate, c.hidden, true);
  down = b.dropout(p + ".output.dropout", down, h_elements, hidden_p);
  const std::string sum2 = b.add(p + ".output.residual", down, h, h_elements);
  const std::string out = b.norm(p + ".output.LayerNorm", sum2, rows, c.hidden, NormKind::kLayerNorm, true, true);
  // BertLayer.feed_forward_chunk calls self.output(intermediate_output, attention_output):
  // its frame holds both arguments, the GELU output and the attention block's LayerNorm
  // output, through BertOutput's dense, dropout, residual add and LayerNorm
  // (modeling_bert.py, transformers 4.44 to 5.23), which matters where the dense saves
  // nothing (frozen under LoRA) and the LayerNorm's input is its own fp32 sum.
  b.hold_until(p + ".output.LayerNorm", act);
  b.hold_until(p + ".output.LayerNorm", h);
  // BertSelfOutput.forward and BertOutput.forward bind the dropout's output to
  // hidden_states and rebind it only when LayerNorm(hidden_states + input_tensor)
  // returns, and BertEncoder.forward's loop (`hidden_states = layer_module(hidden_states,
  // ...)`) holds each layer's input until the layer returns (modeling_bert.py 5.23.0).
  // Under autocast none of them is saved: the LayerNorm output is fp32, what the
  // linears keep is their 16-bit cast of it.
  b.hold_until(p + ".attention.output.LayerNorm", o);
  b.hold_until(p + ".output.LayerNorm", down);
  b.hold_until(p + ".output.LayerNorm", hidden);
  return out;
}

// tanh keeps its output.
std::string tanh(GraphBuilder& b, const std::string& name, const std::string& x, int64_t width) {
  const SizeExpr one = SizeExpr::per_sample(1);
  OpSpec spec{name, "tanh", {x}, times(one, width), std::nullopt, {SavedRef{name, SaveWhen::kInputGrad}}, {},
              times(one, 4 * width), times(one, 2 * width), {}, {}};
  return b.op(spec);
}

// BertForSequenceClassification: pooler (dense + tanh on [CLS]), dropout, classifier.
// [CLS] is hidden_states[:, 0], a view of the last layer's output
// (modeling_bert.py BertPooler), so the pooler's dense, keeping its input for
// its weight gradient, keeps that whole [B, S, hidden] tensor alive, not one
// token (measured by the executor on tests/data/hf/tiny-bert fully fine-tuned:
// activations -3.6% with a one-token copy).
std::string bert_head(GraphBuilder& b, const BertConfig& c, const std::string& hidden, const ZooOptions& options) {
  const SizeExpr one = SizeExpr::per_sample(1);
  const std::string pooled = b.linear("bert.pooler.dense", hidden, one, c.hidden, c.hidden, true);
  std::string x = tanh(b, "bert.pooler.activation", pooled, c.hidden);
  x = b.dropout("dropout", x, times(one, c.hidden), dropout_p(options, c.classifier_dropout));
  return b.linear("classifier", x, one, c.hidden, c.labels, true);
}

// RobertaClassificationHead: [CLS] (features[:, 0, :], a view), dropout, dense,
// tanh, dropout, out_proj. The first dropout reads the view and keeps only its
// mask; without dropout the dense keeps the whole [B, S, hidden] output, as BERT's pooler.
std::string roberta_head(GraphBuilder& b, const BertConfig& c, const std::string& hidden,
                         const ZooOptions& options) {
  const SizeExpr one = SizeExpr::per_sample(1);
  const double p = dropout_p(options, c.classifier_dropout);
  std::string x = b.dropout("classifier.dropout_in", hidden, times(one, c.hidden), p);
  x = b.linear("classifier.dense", x, one, c.hidden, c.hidden, true);
  x = tanh(b, "classifier.tanh", x, c.hidden);
  x = b.dropout("classifier.dropout_out", x, times(one, c.hidden), p);
  return b.linear("classifier.out_proj", x, one, c.hidden, c.labels, true);
}

// BertModel.forward binds the embeddings' output to `embedding_output` and keeps it in
// its frame through the encoder and the pooler, returning only after both
// (modeling_bert.py BertModel.forward, transformers 5.23.0); RobertaModel.forward the
// same through the encoder, the classification model building it without a pooler
// (modeling_roberta.py, add_pooling_layer=False). Under autocast the embeddings'
// LayerNorm and dropout give an fp32 tensor that layer 0's linears keep only as 16-bit
// casts, so nothing saves it: the frame alone keeps it to the forward's end
// (GraphAnalysis::held_in_forward).
void hold_embedding_output(GraphBuilder& b, const BertConfig& c, const std::string& embedding_output,
                           const std::string& last_layer_end) {
  b.hold_until(c.roberta_head ? last_layer_end : std::string("bert.pooler.activation"), embedding_output);
}

}  // namespace

graph::LayerGraph build_bert_large(const ZooOptions& options) { return build_bert_from(kBertLargeUncased, options); }

graph::LayerGraph build_bert_from(const BertConfig& c, const ZooOptions& options) {
  const SizeExpr rows = tokens();
  const SizeExpr h_elements = times(rows, c.hidden);
  // BERT's position_ids are its buffer's first S entries, one row for the batch;
  // RoBERTa's are made per sample from the input ids
  // (create_position_ids_from_input_ids), so are their embeddings.
  const SizeExpr positions = c.roberta_head ? rows : SizeExpr{0, 0, 1, 0, 0, 0};
  GraphBuilder b;
  b.set_param_dtype(DType::kF32);  // published float32
  b.begin_block("embeddings", "embedding", false);
  const std::string ids = b.input("input_ids", rows, DType::kInt64, false);
  const std::string types = b.input("token_type_ids", rows, DType::kInt64, false);
  const std::string pos_ids = b.input("position_ids", positions, DType::kInt64, false);
  const std::string e = std::string(c.prefix) + ".embeddings";
  const std::string words = b.embedding(e + ".word_embeddings", ids, rows, c.vocab, c.hidden);
  const std::string type_e = b.embedding(e + ".token_type_embeddings", types, rows, c.token_types, c.hidden);
  const std::string pos_e = b.embedding(e + ".position_embeddings", pos_ids, positions, c.positions, c.hidden);
  const std::string sum = b.add(e + ".sum_types", words, type_e, h_elements);
  const std::string all = b.add(e + ".sum_positions", sum, pos_e, h_elements);
  std::string hidden = b.norm(e + ".LayerNorm", all, rows, c.hidden, NormKind::kLayerNorm, true, true);
  hidden = b.dropout(e + ".dropout", hidden, h_elements, dropout_p(options, c.hidden_dropout));
  const std::string embedding_output = hidden;
  for (int64_t i = 0; i < c.layers; ++i) hidden = bert_layer(b, c, i, hidden, options);
  const std::string last_layer_end = b.graph().nodes.back().name;

  b.begin_block("head", "classifier", false);
  const SizeExpr one = SizeExpr::per_sample(1);
  const std::string labels = b.input("labels", one, DType::kInt64, false);
  const std::string logits = c.roberta_head ? roberta_head(b, c, hidden, options) : bert_head(b, c, hidden, options);
  hold_embedding_output(b, c, embedding_output, last_layer_end);
  OpSpec loss{"loss", "loss", {logits, labels}, SizeExpr::constant(1), DType::kF32,
              {SavedRef{logits, SaveWhen::kAnyGrad}}, {}, times(one, 5 * c.labels),
              times(one, 2 * c.labels), {}, {}};
  b.op(loss);
  return b.finish();
}

}  // namespace headroom::models
