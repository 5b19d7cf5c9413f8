#include "models/torch/nf4.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <stdexcept>

namespace headroom::models::torch_modules {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// bitsandbytes/functional.py get_4bit_type("nf4"): quantiles of N(0, 1) with
// equal probability mass (create_normal_map(offset=0.9677083)), sorted.
constexpr float kNf4Values[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};


// The absmax of each 64-weight block, f32 (double quantization undone).
torch::Tensor block_absmax(const Nf4Weight& w) {
  if (!w.double_quant()) return w.absmax;
  return dequantize_blockwise(w.absmax, w.nested_absmax, w.nested_quant_map, kNf4NestedBlocksize) + w.offset;
}

const char* dtype_text(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kHalf: return "float16";
    default: throw std::invalid_argument("NF4 weights dequantize to float32, bfloat16 or float16");
  }
}

// bitsandbytes' MatMul4Bit for the training shapes (autograd/_functions.py):
// forward dequantizes and multiplies; backward dequantizes again for dX and
// computes no dW (PyTorch has no gradient for packed 4-bit data).
struct Nf4Matmul : public torch::autograd::Function<Nf4Matmul> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const Nf4Weight& weight) {
    // The storage itself, not a copy: these tensors are the module's buffers.
    for (const auto& [name, tensor] : weight.tensors()) ctx->saved_data["t." + name] = tensor;
    if (weight.double_quant()) ctx->saved_data["offset"] = weight.offset;
    ctx->saved_data["shape"] = weight.shape;
    ctx->saved_data["dtype"] = static_cast<int64_t>(weight.dtype);
    return torch::matmul(x, dequantize_nf4(weight).to(x.scalar_type()).t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto& saved = ctx->saved_data;
    Nf4Weight weight;
    weight.packed = saved["t."].toTensor();
    weight.absmax = saved["t.absmax"].toTensor();
    weight.quant_map = saved["t.quant_map"].toTensor();
    if (saved.count("offset")) {
      weight.nested_absmax = saved["t.nested_absmax"].toTensor();
      weight.nested_quant_map = saved["t.nested_quant_map"].toTensor();
      weight.offset = saved["offset"].toTensor();
    }
    weight.shape = saved["shape"].toIntVector();
    weight.dtype = static_cast<torch::ScalarType>(saved["dtype"].toInt());
    const torch::Tensor& g = grad_outputs[0];
    return {torch::matmul(g, dequantize_nf4(weight).to(g.scalar_type())), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor nf4_code_book(const torch::Device& device) {
  return torch::tensor(std::vector<float>(std::begin(kNf4Values), std::end(kNf4Values)), torch::kFloat).to(device);
}

int64_t Nf4Weight::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<std::pair<std::string, torch::Tensor>> Nf4Weight::tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out = {{"", packed}, {"absmax", absmax}, {"quant_map", quant_map}};
  if (double_quant()) {
    out.emplace_back("nested_absmax", nested_absmax);
    out.emplace_back("nested_quant_map", nested_quant_map);
  }
  return out;
}

Nf4Weight quantize_nf4(const torch::Tensor& weight, bool double_quant) {
  torch::NoGradGuard no_grad;
  Nf4Weight out;
  out.shape = weight.sizes().vec();
  out.dtype = weight.scalar_type();
  dtype_text(out.dtype);  // refuses other dtypes before any work
  out.quant_map = nf4_code_book(weight.device());
  auto [scaled, absmax] = scale_blocks(weight, kNf4Blocksize);
  if (scaled.numel() % 2 != 0) scaled = torch::constant_pad_nd(scaled, {0, 1});
  const torch::Tensor q = nearest_code(scaled, out.quant_map).to(torch::kUInt8);
  out.packed = torch::bitwise_or(q.slice(0, 0, torch::indexing::None, 2).bitwise_left_shift(4),
                                 q.slice(0, 1, torch::indexing::None, 2))
                   .unsqueeze(1);
  if (!double_quant) {
    out.absmax = absmax;
    return out;
  }
  // bnb quantize_4bit(compress_statistics=True): offset = absmax.mean(), the
  // rest quantize_blockwise(absmax - offset, blocksize=256) with the dynamic map.
  out.offset = absmax.mean();
  out.nested_quant_map = dynamic_map(true, weight.device());
  auto [codes, nested_absmax] = quantize_blockwise(absmax - out.offset, out.nested_quant_map, kNf4NestedBlocksize);
  out.absmax = codes;
  out.nested_absmax = nested_absmax;
  return out;
}

torch::Tensor dequantize_nf4(const Nf4Weight& w) {
  torch::NoGradGuard no_grad;
  const int64_t n = w.numel();
  // Both values of every possible byte (high nibble first), looked up once per
  // byte: one gather of n/2 rows instead of unpacking nibbles and gathering n.
  const torch::Tensor all_bytes = torch::arange(256, torch::TensorOptions().dtype(torch::kLong).device(w.packed.device()));
  const torch::Tensor pairs =
      torch::stack({w.quant_map.index({all_bytes.bitwise_right_shift(4)}), w.quant_map.index({all_bytes.bitwise_and(0xF)})},
                   1);
  const torch::Tensor values = pairs.index_select(0, w.packed.reshape(-1).to(torch::kLong)).view(-1).slice(0, 0, n);
  return scale_back(values, block_absmax(w), kNf4Blocksize).view(w.shape).to(w.dtype);
}

std::string nf4_quant_state_json(const Nf4Weight& w) {
  // Key order as QuantState.as_dict writes it.
  nlohmann::ordered_json j;
  j["quant_type"] = "nf4";
  j["blocksize"] = kNf4Blocksize;
  j["dtype"] = dtype_text(w.dtype);
  j["shape"] = w.shape;
  if (w.double_quant()) {
    j["nested_blocksize"] = kNf4NestedBlocksize;
    j["nested_offset"] = w.offset.item<float>();
    j["nested_dtype"] = "float32";
  }
  return j.dump();
}

void read_nf4_quant_state(const std::string& text, const std::string& origin, Nf4Weight& w,
                          const torch::Device& device) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  auto fail = [&](const std::string& field, const std::string& expected) {
    throw std::invalid_argument(origin + ": " + field + ": expected " + expected);
  };
  if (!j.is_object()) fail("quant_state", "a JSON object (QuantState.as_dict(packed=True))");
  if (j.value("quant_type", "") != "nf4") fail("quant_type", "\"nf4\" (FP4 is not supported)");
  if (!j.contains("blocksize") || j["blocksize"] != kNf4Blocksize) fail("blocksize", "64");
  const std::string dtype = j.value("dtype", "");
  if (dtype == "float32") {
    w.dtype = torch::kFloat;
  } else if (dtype == "bfloat16") {
    w.dtype = torch::kBFloat16;
  } else if (dtype == "float16") {
    w.dtype = torch::kHalf;
  } else {
    fail("dtype", "float32, bfloat16 or float16");
  }
  if (!j.contains("shape") || !j["shape"].is_array() || j["shape"].empty()) fail("shape", "a list of sizes");
  w.shape.clear();
  for (const nlohmann::json& d : j["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() <= 0) fail("shape", "positive integer sizes");
    w.shape.push_back(d.get<int64_t>());
  }
  if (j.contains("nested_offset")) {
    if (j.value("nested_blocksize", 0) != kNf4NestedBlocksize) fail("nested_blocksize", "256");
    if (!j["nested_offset"].is_number()) fail("nested_offset", "a number");
    w.offset = torch::tensor(j["nested_offset"].get<float>(), torch::kFloat).to(device);
  }
}

torch::Tensor nf4_linear(const torch::Tensor& x, const Nf4Weight& weight) { return Nf4Matmul::apply(x, weight); }

}  // namespace headroom::models::torch_modules
