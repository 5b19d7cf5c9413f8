// Checkpointing through LibTorch: gradients equal those of the run without
// checkpointing, for the first block, every block, a frozen base with LoRA
// adapters (whose first block's input does not require grad), and a fully
// frozen model, where there is nothing to differentiate and nothing fails.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "executor/checkpoint.h"
#include "models/torch/llama_module.h"

namespace headroom::executor {
namespace {

using models::torch_modules::DecoderLayer;
using models::torch_modules::LlamaForCausalLM;

models::LlamaConfig tiny_config() {
  models::LlamaConfig c;
  c.hidden = 64;
  c.intermediate = 176;
  c.layers = 4;
  c.heads = 4;
  c.kv_heads = 2;
  c.vocab = 256;
  c.max_position = 256;
  return c;
}

models::torch_modules::LlamaForCausalLMImpl::Checkpointer checkpointer() {
  return [](DecoderLayer& layer, const torch::Tensor& hidden, const torch::Tensor& cos, const torch::Tensor& sin) {
    std::vector<torch::Tensor> trainable;
    for (const torch::Tensor& p : layer->parameters()) {
      if (p.requires_grad()) trainable.push_back(p);
    }
    DecoderLayer held = layer;
    return checkpoint(
        [held](const std::vector<torch::Tensor>& in) mutable {
          return std::vector<torch::Tensor>{held->forward(in[0], in[1], in[2])};
        },
        {hidden, cos, sin}, trainable)[0];
  };
}

// Gradients of every parameter after one backward, in parameter order (undefined: none).
std::vector<torch::Tensor> gradients(LlamaForCausalLM& model, const torch::Tensor& ids, const std::set<int>& checkpointed) {
  model->zero_grad();
  const torch::Tensor loss = model->forward(ids, checkpointed, checkpointer());
  if (loss.requires_grad()) loss.backward();
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : model->parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return out;
}

void check_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  int compared = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(a[i].defined() == b[i].defined());
    if (!a[i].defined()) continue;
    ++compared;
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    const double scale = std::max(1e-12, a[i].abs().max().item<double>());
    CHECK(diff / scale < 1e-10);
  }
  CHECK(compared > 0);
}

}  // namespace

TEST_CASE("checkpointed gradients equal plain gradients (float64)") {
  torch::manual_seed(0);
  torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  LlamaForCausalLM model(tiny_config());
  const torch::Tensor ids = torch::randint(0, 256, {2, 16}, torch::kLong);
  const auto plain = gradients(model, ids, {});
  SUBCASE("the first block") { check_equal(plain, gradients(model, ids, {0})); }
  SUBCASE("every block") { check_equal(plain, gradients(model, ids, {0, 1, 2, 3})); }
  torch::set_default_dtype(caffe2::TypeMeta::Make<float>());
}

TEST_CASE("a frozen base with adapters: the first block's input needs no grad, yet its adapters get gradients") {
  torch::manual_seed(1);
  torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  models::torch_modules::LoraOptions lora;
  lora.rank = 4;
  LlamaForCausalLM model(tiny_config(), lora);
  model->freeze_base();
  // Give the adapters' B non-zero values so every gradient is non-trivial.
  for (auto& item : model->named_parameters()) {
    if (item.key().find("lora_B") != std::string::npos) {
      torch::NoGradGuard no_grad;
      item.value().normal_(0, 0.02);
    }
  }
  const torch::Tensor ids = torch::randint(0, 256, {2, 16}, torch::kLong);
  const auto plain = gradients(model, ids, {});
  const auto every = gradients(model, ids, {0, 1, 2, 3});
  check_equal(plain, every);
  // The first block's adapter has a gradient although its input (a frozen embedding) has none.
  bool first_block_adapter = false;
  size_t index = 0;
  for (auto& item : model->named_parameters()) {
    if (item.key() == "model.layers.0.self_attn.q_proj.lora_A.weight") first_block_adapter = every[index].defined();
    ++index;
  }
  CHECK(first_block_adapter);
  torch::set_default_dtype(caffe2::TypeMeta::Make<float>());
}

TEST_CASE("a fully frozen model checkpoints without error and produces no gradients") {
  torch::manual_seed(2);
  LlamaForCausalLM model(tiny_config());
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  const torch::Tensor ids = torch::randint(0, 256, {1, 8}, torch::kLong);
  const torch::Tensor loss = model->forward(ids, {0, 1, 2, 3}, checkpointer());
  CHECK_FALSE(loss.requires_grad());
  for (const torch::Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());
}

}  // namespace headroom::executor
