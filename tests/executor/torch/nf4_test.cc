// QLoRA's NF4 storage against bitsandbytes itself: weights bitsandbytes 0.50.2
// quantized (tests/data/nf4/bnb_nf4_reference.safetensors, written by
// scripts/make_nf4_reference.py) must come out of models/torch/nf4.cc byte for
// byte, its state dict must dequantize to what bitsandbytes dequantized, and a
// LoRA linear over an NF4 base must have the gradients of one over the
// dequantized weight.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "executor/executable_model.h"
#include "executor/weights.h"
#include "graph/safetensors_header.h"
#include "models/torch/llama_module.h"
#include "models/torch/layers.h"
#include "models/torch/nf4.h"

// c10/util/logging defines CHECK (an abort); the tests mean doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace headroom::models::torch_modules {
namespace {

const std::string kReference = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/nf4/bnb_nf4_reference.safetensors";
// A tiny Llama quantized and saved by transformers and bitsandbytes (scripts/make_bnb_checkpoint.py).
const std::string kBnbCheckpoint = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/tiny-llama-bnb-nf4";

// Every tensor of a safetensors file, by name.
std::map<std::string, torch::Tensor> read_reference(const std::string& path = kReference) {
  Result<std::vector<graph::SafetensorsEntry>> entries = graph::read_safetensors_header(path);
  REQUIRE_MESSAGE(entries.is_ok(), entries.message());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[i]);
  const int64_t data = 8 + static_cast<int64_t>(header);
  std::map<std::string, torch::Tensor> out;
  for (const graph::SafetensorsEntry& e : entries.value()) {
    torch::ScalarType type = torch::kFloat;
    if (e.dtype == graph::DType::kBF16) type = torch::kBFloat16;
    if (e.dtype == graph::DType::kUInt8) type = torch::kUInt8;
    std::vector<char> copy(bytes.begin() + data + e.begin, bytes.begin() + data + e.end);
    out[e.name] = torch::from_blob(copy.data(), e.shape, type).clone();
  }
  return out;
}

std::string text_of(const torch::Tensor& bytes) {
  const torch::Tensor b = bytes.contiguous();
  return std::string(reinterpret_cast<const char*>(b.data_ptr<uint8_t>()), static_cast<size_t>(b.numel()));
}

bool same(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && torch::equal(a, b);
}

// The state dict bitsandbytes wrote for case `name`, read back into an Nf4Weight.
Nf4Weight from_state_dict(const std::map<std::string, torch::Tensor>& ref, const std::string& name) {
  Nf4Weight w;
  w.packed = ref.at(name + ".weight");
  w.absmax = ref.at(name + ".weight.absmax");
  w.quant_map = ref.at(name + ".weight.quant_map");
  if (ref.count(name + ".weight.nested_absmax")) {
    w.nested_absmax = ref.at(name + ".weight.nested_absmax");
    w.nested_quant_map = ref.at(name + ".weight.nested_quant_map");
  }
  read_nf4_quant_state(text_of(ref.at(name + ".weight.quant_state.bitsandbytes__nf4")), name, w, torch::kCPU);
  return w;
}

// The 8-bit absmax codes equal bitsandbytes', except near-ties: neighbouring
// codes whose distances to the scaled value differ by under 1e-5.
bool nested_codes_agree(const Nf4Weight& q, const torch::Tensor& theirs) {
  if (q.absmax.sizes() != theirs.sizes() || q.absmax.scalar_type() != torch::kUInt8) return false;
  const torch::Tensor differ = (q.absmax != theirs).nonzero().view(-1);
  if (differ.numel() > q.absmax.numel() / 50) return false;
  const torch::Tensor absmax = dequantize_blockwise(q.absmax, q.nested_absmax, q.nested_quant_map, kNf4NestedBlocksize);
  for (int64_t k = 0; k < differ.numel(); ++k) {
    const int64_t i = differ[k].item<int64_t>();
    const int64_t mine = q.absmax[i].item<int64_t>();
    const int64_t other = theirs[i].item<int64_t>();
    if (std::abs(mine - other) != 1) return false;
    // The value both codes approximate, scaled as quantize_blockwise scaled it.
    const double scale = q.nested_absmax[i / kNf4NestedBlocksize].item<double>();
    const double value = absmax[i].item<double>() / scale;  // == code[mine]
    const double a = q.nested_quant_map[mine].item<double>();
    const double b = q.nested_quant_map[other].item<double>();
    if (std::abs(value - a) > 1e-9 || std::abs(b - a) > 1e-3) return false;
  }
  return true;
}

TEST_CASE("the NF4 code book and the dynamic map are bitsandbytes' own, bit for bit") {
  const auto ref = read_reference();
  CHECK(same(nf4_code_book(), ref.at("nf4_code")));
  CHECK(same(dynamic_map(), ref.at("dynamic_map")));
}

TEST_CASE("quantize_nf4 writes what bitsandbytes quantize_4bit writes") {
  const auto ref = read_reference();
  for (const char* name : {"double_quant", "plain", "two_nested_blocks"}) {
    CAPTURE(name);
    const std::string n = name;
    const torch::Tensor input = ref.at(n + ".input");
    const bool double_quant = ref.count(n + ".weight.nested_absmax") > 0;
    const Nf4Weight q = quantize_nf4(input, double_quant);
    // Codes, the first-level absmax (or its 8-bit codes) and the nested constants.
    CHECK(same(q.packed, ref.at(n + ".weight")));
    CHECK(same(q.quant_map, ref.at(n + ".weight.quant_map")));
    if (!double_quant) CHECK(same(q.absmax, ref.at(n + ".weight.absmax")));
    if (double_quant) {
      // bitsandbytes' CPU kernel picks a code through a lookup table, which can
      // break a near-tie the other way: every other code must be the same.
      CHECK(nested_codes_agree(q, ref.at(n + ".weight.absmax")));
      CHECK(same(q.nested_absmax, ref.at(n + ".weight.nested_absmax")));
      CHECK(same(q.nested_quant_map, ref.at(n + ".weight.nested_quant_map")));
    }
    // The quant_state JSON carries the same fields and values (offset included).
    CHECK(nlohmann::json::parse(nf4_quant_state_json(q)) ==
          nlohmann::json::parse(text_of(ref.at(n + ".weight.quant_state.bitsandbytes__nf4"))));
    const torch::Tensor expected = ref.at(n + ".dequantized");
    if (torch::equal(q.absmax, ref.at(n + ".weight.absmax"))) {
      CHECK(same(dequantize_nf4(q), expected));
    } else {
      // A near-tie broken the other way moves that block's absmax by one step of
      // the dynamic map there (0.00056) times the nested scale (37 here): 0.021.
      const torch::Tensor diff = (dequantize_nf4(q).to(torch::kFloat) - expected.to(torch::kFloat)).abs();
      CHECK(diff.max().item<float>() <= 0.021f + 0.0625f);  // plus one bf16 step of the largest values
      CHECK((diff > 0).sum().item<int64_t>() <= 3 * kNf4Blocksize);  // only the three blocks
    }
  }
}

TEST_CASE("a bitsandbytes NF4 state dict dequantizes to what bitsandbytes dequantized") {
  const auto ref = read_reference();
  for (const char* name : {"double_quant", "plain", "two_nested_blocks"}) {
    CAPTURE(name);
    const Nf4Weight w = from_state_dict(ref, name);
    CHECK(same(dequantize_nf4(w), ref.at(std::string(name) + ".dequantized")));
  }
}

TEST_CASE("NF4 keeps every weight within half a code step of its block's scale") {
  // The largest gap between neighbouring NF4 values is -0.6962 - (-1) = 0.3038,
  // so the nearest value is within 0.1519 of the scaled weight.
  torch::manual_seed(3);
  const torch::Tensor w = torch::randn({128, 96});
  const Nf4Weight q = quantize_nf4(w, false);
  const torch::Tensor absmax = q.absmax.repeat_interleave(kNf4Blocksize).view({128, 96});
  const torch::Tensor error = ((dequantize_nf4(q) - w).abs() / absmax).max();
  CHECK(error.item<float>() <= 0.1520f);
  CHECK(error.item<float>() > 0.01f);  // 4 bits are not exact: the check can tell
  // A block of zeros stays zeros (absmax clamped, not divided by zero).
  const Nf4Weight zeros = quantize_nf4(torch::zeros({2, 64}), true);
  CHECK(torch::equal(dequantize_nf4(zeros), torch::zeros({2, 64})));
}

TEST_CASE("an NF4 base with LoRA has the gradients of a linear over the dequantized weight") {
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    CAPTURE(dtype);
    torch::manual_seed(7);
    Linear quantized(48, 80, false);
    quantized->add_lora(4, 8);
    torch::nn::init::normal_(quantized->lora_b, 0, 0.1);  // a fresh B is zero: no gradient would reach A
    quantized->to(dtype);
    Linear reference(48, 80, false);
    reference->add_lora(4, 8);
    reference->to(dtype);
    {
      torch::NoGradGuard no_grad;
      reference->lora_a.copy_(quantized->lora_a);
      reference->lora_b.copy_(quantized->lora_b);
    }
    quantized->weight.set_requires_grad(false);
    reference->weight.set_requires_grad(false);
    quantized->quantize_nf4(true);
    {
      torch::NoGradGuard no_grad;
      reference->weight.copy_(dequantize_nf4(*quantized->nf4));
    }
    CHECK((quantized->weight.scalar_type() == torch::kUInt8));  // the parameter holds the packed bytes
    const torch::Tensor x = torch::randn({3, 5, 48}).to(dtype);
    const torch::Tensor xq = x.clone().requires_grad_(true);
    const torch::Tensor xr = x.clone().requires_grad_(true);
    const torch::Tensor g = torch::randn({3, 5, 80}).to(dtype);
    const torch::Tensor yq = quantized->forward(xq);
    const torch::Tensor yr = reference->forward(xr);
    CHECK(torch::equal(yq, yr));
    (yq * g).sum().backward();
    (yr * g).sum().backward();
    CHECK(torch::equal(xq.grad(), xr.grad()));
    CHECK(torch::equal(quantized->lora_a.grad(), reference->lora_a.grad()));
    CHECK(torch::equal(quantized->lora_b.grad(), reference->lora_b.grad()));
    CHECK(quantized->lora_a.grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("the NF4 matmul keeps nothing of its input for backward") {
  // bitsandbytes MatMul4Bit saves only the packed weight: with a frozen base the
  // graph holds no activation, so dropping the input frees it.
  torch::manual_seed(1);
  const Nf4Weight q = quantize_nf4(torch::randn({64, 64}), true);
  torch::Tensor x = torch::randn({32, 64}).requires_grad_(true);
  torch::Tensor h = x * 2;  // an activation only the NF4 matmul could keep
  const c10::weak_intrusive_ptr<c10::StorageImpl> storage(h.storage().getWeakStorageImpl());
  torch::Tensor y = nf4_linear(h, q);
  h = torch::Tensor();
  CHECK(storage.expired());
  y.sum().backward();
  CHECK(x.grad().defined());
}

TEST_CASE("a quant_state that is not NF4 at block 64 is refused naming the field") {
  Nf4Weight w;
  auto message = [&](const std::string& json) {
    try {
      read_nf4_quant_state(json, "q_proj.weight", w, torch::kCPU);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message(R"({"quant_type": "fp4", "blocksize": 64, "dtype": "bfloat16", "shape": [4, 4]})") ==
        "q_proj.weight: quant_type: expected \"nf4\" (FP4 is not supported)");
  CHECK(message(R"({"quant_type": "nf4", "blocksize": 128, "dtype": "bfloat16", "shape": [4, 4]})") ==
        "q_proj.weight: blocksize: expected 64");
  CHECK(message(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "int8", "shape": [4, 4]})") ==
        "q_proj.weight: dtype: expected float32, bfloat16 or float16");
  CHECK(message(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [0]})") ==
        "q_proj.weight: shape: expected positive integer sizes");
  CHECK(message("not json").find("q_proj.weight: quant_state") == 0);
}

// The checkpoint's module with its NF4 linears quantized as a QLoRA plan does,
// and the names load_safetensors left for load_nf4_states.
std::pair<LlamaForCausalLM, std::vector<std::string>> load_bnb_checkpoint(bool double_quant) {
  Result<executor::ExecutableModel> model = executor::executable_model(kBnbCheckpoint, "test");
  REQUIRE_MESSAGE(model.is_ok(), model.message());
  LlamaForCausalLM net(model->llama);
  Result<executor::LoadedWeights> loaded = executor::load_safetensors(*net, kBnbCheckpoint);
  REQUIRE_MESSAGE(loaded.is_ok(), loaded.message());
  net->to(torch::kBFloat16);
  for (const auto& item : net->named_modules()) {
    auto* linear = dynamic_cast<LinearImpl*>(item.value().get());
    const std::string name = item.key() + ".weight";
    if (linear && std::count(loaded->nf4_weights.begin(), loaded->nf4_weights.end(), name)) {
      linear->quantize_nf4(double_quant);
    }
  }
  return {net, loaded->nf4_weights};
}

TEST_CASE("a checkpoint bitsandbytes quantized loads into the NF4 linears byte for byte") {
  auto [net, nf4_weights] = load_bnb_checkpoint(true);
  CHECK(nf4_weights.size() == 14);  // q, k, v, o, gate, up, down in 2 layers; lm_head stays bf16
  REQUIRE(executor::load_nf4_states(*net, kBnbCheckpoint, nf4_weights).is_ok());
  const auto stored = read_reference(kBnbCheckpoint + "/model.safetensors");
  int compared = 0;
  for (const auto& item : net->named_modules()) {
    auto* linear = dynamic_cast<LinearImpl*>(item.value().get());
    if (!linear || !linear->nf4) continue;
    const std::string name = item.key() + ".weight";
    CAPTURE(name);
    for (const auto& [suffix, tensor] : linear->nf4->tensors()) {
      CHECK(same(tensor, stored.at(suffix.empty() ? name : name + "." + suffix)));
    }
    const nlohmann::json state = nlohmann::json::parse(text_of(stored.at(name + ".quant_state.bitsandbytes__nf4")));
    CHECK(linear->nf4->offset.item<float>() == state["nested_offset"].get<float>());
    ++compared;
  }
  CHECK(compared == 14);
  // The module computes with them: a forward pass gives a finite loss.
  const torch::Tensor ids = torch::randint(0, 256, {2, 16}, torch::kLong);
  CHECK(std::isfinite(net->loss_and_logits(ids, {}).first.item<double>()));
}

TEST_CASE("a pre-quantized checkpoint that the plan quantizes otherwise is refused naming the tensor") {
  auto [net, nf4_weights] = load_bnb_checkpoint(false);
  const Status status = executor::load_nf4_states(*net, kBnbCheckpoint, nf4_weights);
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("model.layers.0.") != std::string::npos);
  CHECK(status.message().find("double-quantized, but the plan says nf4_double_quant false") != std::string::npos);
}

}  // namespace
}  // namespace headroom::models::torch_modules
