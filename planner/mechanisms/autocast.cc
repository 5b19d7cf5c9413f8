#include "planner/mechanisms/autocast.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/op_traits.h"
#include "planner/mechanisms/trainability.h"

namespace headroom::planner {
namespace {

using graph::DType;

// Ops on autocast's lower-precision list (graph/op_traits.h).
bool runs_in_16_bit(const std::string& op) { return graph::op_traits(op).autocast_to_16_bit; }

// Whether autocast finds `param` in fp32: every unquantized parameter of an fp32
// model, only the upcast ones of a 16-bit model.
bool is_fp32_weight(const graph::Param& param, AutocastWeights weights) {
  if (is_quantized_storage(param.dtype)) return false;
  return weights == AutocastWeights::kFp32Model || param.upcast_fp32;
}

// The weight a lower-precision op multiplies by: "<node>.weight".
const graph::Param* node_weight(const graph::Node& node) {
  for (const graph::Param& param : node.params) {
    if (param.name == node.name + ".weight") return &param;
  }
  return nullptr;
}

// That weight when autocast finds it in fp32.
const graph::Param* matmul_weight(const graph::Node& node, AutocastWeights weights) {
  const graph::Param* weight = node_weight(node);
  return weight != nullptr && is_fp32_weight(*weight, weights) ? weight : nullptr;
}

// The packed 4-bit weight of a bitsandbytes Linear4bit, if `node` is one.
const graph::Param* four_bit_weight(const graph::Node& node) {
  const graph::Param* weight = node.op == graph::op::kLinear ? node_weight(node) : nullptr;
  return weight != nullptr && (weight->dtype == DType::kNF4 || weight->dtype == DType::kFP4) ? weight : nullptr;
}

// nn.LayerNorm (aten layer_norm, on autocast's fp32 list): the graph builders'
// norm with a per-row mean (GraphBuilder::norm). RMSNorms are not on the list:
// transformers' and diffusers' upcast inside their Python ops and cast back, and
// F.rms_norm returns its input's dtype.
bool is_layer_norm(const graph::Node& node) {
  return node.op == graph::op::kNorm && std::find(node.outputs.begin(), node.outputs.end(), node.name + ":mean") !=
                                  node.outputs.end();
}

// Nearest 2x interpolation (diffusers' Upsample2D, models/unet_parts.cc): on
// autocast's fp32 list in torch 2.11 (autocast_mode.h AT_FORALL_FP32 lists the
// upsample_* ops; bench/oracle/cuda_autocast.py mirrors it).
constexpr std::string_view kUpsampleNearest2d = "upsample_nearest2d";

// Ops autocast runs in fp32 (autocast_mode.h, AT_FORALL_FP32: layer_norm, pow
// (GPT-2's gelu_new cubes x), upsample_nearest2d; AT_FORALL_FP32_SET_OPT_DTYPE:
// softmax given no dtype runs with dtype=float).
bool runs_in_fp32(const graph::Node& node) {
  return is_layer_norm(node) || node.op == graph::op::kSoftmax || node.op == graph::op::kPow ||
         node.op == kUpsampleNearest2d;
}

// A cast node "name" in `block` writing tensor "name" (16-bit, `elements`).
void add_cast(std::vector<graph::Node>& nodes, std::vector<graph::Tensor>& tensors, const std::string& name,
              int block, std::vector<std::string> inputs, graph::SizeExpr elements) {
  // Reads 4 bytes and writes 2 per element: three 16-bit elements of traffic.
  const graph::SizeExpr io = elements.scaled(3);
  add_cast_node(nodes, tensors, name, block, std::move(inputs), std::move(elements), std::nullopt, io);
}

bool has_fp32_adapters(const graph::Node& node) {
  return std::any_of(node.params.begin(), node.params.end(), [](const graph::Param& param) {
    return is_lora_adapter(param) && param.trainable && param.dtype == DType::kF32;
  });
}

// lora_A reads and keeps a copy of the layer's input x of its own ("<node>.adapter_input_cast",
// `dtype` unset: 16-bit), made in front of the node, where add_lora had it keep the
// shared x (which a frozen base linear then keeps no more).
void keep_own_adapter_input(std::vector<graph::Node>& nodes, std::vector<graph::Tensor>& tensors, graph::Node& node,
                            std::optional<DType> dtype) {
  const std::string x = node.inputs.front();
  const std::string name = node.name + ".adapter_input_cast";
  const graph::SizeExpr elements = node.linear->rows.scaled(node.linear->in_features);
  // Reads 2 bytes and writes 2 or 4 an element: three 16-bit elements of traffic either way.
  add_cast_node(nodes, tensors, name, node.block, {x}, elements, dtype, elements.scaled(3));
  const bool frozen_base = std::none_of(node.params.begin(), node.params.end(), [](const graph::Param& param) {
    return param.trainable && !is_lora_adapter(param);
  });
  if (frozen_base) {
    std::erase_if(node.saves, [&](const graph::SavedRef& saved) {
      return saved.tensor == x && saved.when == graph::SaveWhen::kParamGrad;
    });
  }
  node.inputs.push_back(name);
  node.saves.push_back({name, graph::SaveWhen::kParamGrad});
}

// PEFT's Linear.forward binds the fp32 copy to `x` (x = x.to(lora_A.weight.dtype)) until
// it returns, and computes result + lora_B(lora_A(x)) * scaling with the base layer's
// result held: while the product and the sum are made, the copy and three [rows, out]
// tensors are live where the node's output counts one (peft 0.12.0 and 0.21.2
// tuners/lora/layer.py, Linear.forward; the oracle: Mixtral-2L's w2 under the 4.x
// expert loop, `_to_copy` f32 [n, 14336], two `mm` and the scaled `mul`). Forward only.
void hold_fp32_adapter_input(graph::Node& node) {
  if (!node.bwd_workspace_elements) node.bwd_workspace_elements = node.workspace_elements;
  const graph::SizeExpr fp32_copy = node.linear->rows.scaled(2 * node.linear->in_features);  // 16-bit elements
  node.workspace_elements += fp32_copy;
  node.workspace_elements += node.linear->rows.scaled(2 * node.linear->out_features);
}

bool has_lora_dropout(const graph::Node& node) {
  return std::find(node.outputs.begin(), node.outputs.end(), node.name + ".lora_dropout_out") != node.outputs.end();
}

// PEFT casts a LoRA layer's input to the adapters' dtype before lora_A
// (peft/tuners/lora/layer.py, Linear.forward: x = self._cast_input_dtype(x,
// lora_A.weight.dtype); x.to(lora_A.weight.dtype) since d6015bc, May 2023).
// Under autocast lora_A casts that fp32 copy back to 16 bits: a tensor of the
// layer's own, which lora_A keeps for its weight gradient. So each adapted
// linear with a 16-bit input keeps its own copy of it, where the graph had
// lora_A keep the shared x. With lora dropout the dropout output already is
// that per-layer tensor (add_lora), and an fp32 input already has its cast
// ("<node>.cast:<input>").
// PEFT's bitsandbytes LoRA layers skip that cast under autocast
// (peft/tuners/lora/bnb.py: requires_conversion = not torch.is_autocast_enabled(),
// peft 0.7 to 0.21): lora_A reads the layer's input itself, shared with the
// other 4-bit linears that read it.
void copy_adapter_input(std::vector<graph::Node>& nodes, std::vector<graph::Tensor>& tensors, graph::Node& node) {
  if (node.op != graph::op::kLinear || !node.linear || node.inputs.empty() || !has_fp32_adapters(node)) return;
  if (four_bit_weight(node) != nullptr) return;
  if (node.inputs.front().starts_with(node.name + ".cast:")) return;
  const std::string name = node.name + ".adapter_input_cast";
  if (std::find(node.inputs.begin(), node.inputs.end(), name) != node.inputs.end()) return;  // copied already
  if (has_lora_dropout(node)) return;
  keep_own_adapter_input(nodes, tensors, node, std::nullopt);
  hold_fp32_adapter_input(node);
}

// `node` reads, and keeps wherever it kept `input`, the cast `name` instead.
void read_through_cast(graph::Node& node, std::string& input, const std::string& name) {
  for (graph::SavedRef& saved : node.saves) {
    if (saved.tensor == input) saved.tensor = name;
  }
  input = name;
}

// bitsandbytes' Linear4bit fed an fp32 input (bitsandbytes/nn/modules.py,
// Linear4bit.forward): it casts the input to its compute dtype (transformers passes
// bnb_4bit_compute_dtype, the run's 16 bits in the QLoRA recipes), runs MatMul4Bit
// on that copy, which keeps nothing of it, and copies the 16-bit result back to
// the input's dtype (`out.to(inp_dtype)`): an fp32 output, and the 16-bit result
// beside it for a moment. The 16-bit copy of the input is the cast autocast's
// rewrite puts in front of the node. From bitsandbytes 0.47 (812ef06a) a compute
// dtype given at construction is kept; up to 0.46 the first call switched it to an
// fp32 input's dtype (set_compute_type), so the weight was dequantized and copied
// to fp32 as well: mechanisms/bnb_matmul4bit.h, by the release.
void copy_four_bit_output(graph::Node& node) {
  const graph::SizeExpr result = node.linear->rows.scaled(node.linear->out_features);
  if (!node.bwd_workspace_elements) node.bwd_workspace_elements = node.workspace_elements;
  node.workspace_elements += result;  // the 16-bit result beside its fp32 copy
  // The copy reads 2 bytes and writes 4 an element.
  node.fwd_io_elements += result.scaled(3);
}


// An op on autocast's fp32 list given a 16-bit input runs on an fp32 copy of it
// (cached_cast to kFloat; upcasts are never cached): "<node>.cast:<input>", what
// layer_norm and pow keep for backward in place of x, and what softmax only
// reads (it keeps its output). layer_norm's 16-bit weight and bias are copied to fp32 too,
// and native_layer_norm keeps both for backward (derivatives.yaml):
// "<node>.affine_cast".
void upcast_fp32_op_inputs(std::vector<graph::Node>& nodes, std::vector<graph::Tensor>& tensors,
                           graph::Node& node, const std::map<std::string, graph::Tensor*>& known,
                           AutocastWeights weights, DType low) {
  const std::string input = node.inputs.front();
  const graph::Tensor* tensor = known.at(input);
  const bool half_to_float = node.op == graph::op::kSoftmax && low == DType::kF16;
  if (tensor->dtype != DType::kF32 && !half_to_float) {
    const std::string name = node.name + ".cast:" + input;
    // Reads 2 bytes and writes 4 an element: three 16-bit elements of traffic.
    add_cast_node(nodes, tensors, name, node.block, {input}, tensor->elements, DType::kF32, tensor->elements.scaled(3));
    read_through_cast(node, node.inputs.front(), name);
  }
  if (!is_layer_norm(node)) return;
  int64_t affine = 0;
  for (const graph::Param& param : node.params) {
    if (!is_fp32_weight(param, weights) && !is_quantized_storage(param.dtype)) affine += param.elements();
  }
  if (affine == 0) return;
  const std::string name = node.name + ".affine_cast";
  add_cast_node(nodes, tensors, name, node.block, {}, graph::SizeExpr::constant(affine), DType::kF32,
                graph::SizeExpr::constant(affine).scaled(3));
  node.inputs.push_back(name);
  node.saves.push_back({name, graph::SaveWhen::kAnyGrad});
}

// Which tensors autocast finds in fp32, learnt producers first.
bool is_integer(DType dtype) {
  return dtype == DType::kInt64 || dtype == DType::kInt32 || dtype == DType::kInt8 || dtype == DType::kUInt8 ||
         dtype == DType::kBool;
}

class Fp32Tensors {
 public:
  Fp32Tensors(graph::LayerGraph& graph, AutocastWeights weights) : weights_(weights) {
    for (graph::Tensor& tensor : graph.tensors) by_name_[tensor.name] = &tensor;
    // A batch the data pipeline hands over in fp32 is fp32 over a 16-bit model too
    // (an image processor's pixel_values, models/vision.h VisionSpec::fp32_pixels).
    std::set<std::string> produced;
    for (const graph::Node& node : graph.nodes) produced.insert(node.outputs.begin(), node.outputs.end());
    for (const graph::Tensor& tensor : graph.tensors) {
      if (tensor.dtype == DType::kF32 && !produced.contains(tensor.name)) promoted_.insert(tensor.name);
    }
  }
  AutocastWeights weights() const { return weights_; }
  const std::map<std::string, graph::Tensor*>& by_name() const { return by_name_; }
  const graph::Tensor& tensor(const std::string& name) const { return *by_name_.at(name); }

  bool is_f32(const std::string& name) const {
    if (weights_ == AutocastWeights::kSixteenBitModel) return promoted_.count(name) > 0;
    return by_name_.at(name)->dtype == DType::kF32;
  }
  void make_f32(const std::string& name) {
    graph::Tensor* tensor = by_name_.at(name);
    // An integer or bool output (topk's indices of fp32 scores, a sort's
    // permutation) stays what it is, and promotes nothing it feeds (an index op
    // gathering 16-bit rows by it returns 16-bit rows).
    if (tensor->dtype && is_integer(*tensor->dtype)) return;
    if (!tensor->dtype) tensor->dtype = DType::kF32;
    promoted_.insert(name);
  }

 private:
  std::map<std::string, graph::Tensor*> by_name_;
  // Over a 16-bit model only what the upcast weights make fp32 counts: the graph's
  // own fp32 intermediates (an op's upcast inside Python code, a sinusoidal
  // embedding) are cast back by the code that made them (diffusers'
  // timesteps_proj.to(dtype), LlamaRMSNorm's .to(input_dtype)).
  std::set<std::string> promoted_;
  AutocastWeights weights_;
};

// Whether an op on neither of autocast's lists writes fp32 for its parameters' sake.
bool params_make_fp32(const graph::Node& node, const Fp32Tensors& fp32) {
  const AutocastWeights weights = fp32.weights();
  const bool owns_fp32 = std::any_of(node.params.begin(), node.params.end(),
                                     [&](const graph::Param& p) { return is_fp32_weight(p, weights); });
  // batch_norm is on neither of autocast's lists, and cuDNN's and the native
  // kernels write the input's dtype beside fp32 weights and statistics
  // (aten/src/ATen/native/cudnn/BatchNorm.cpp): its weights do not make it fp32.
  const bool keeps_input_dtype = node.op.starts_with("batch_norm");
  // An RMSNorm in Python ops returns weight * x.to(input_dtype): fp32 where its
  // weight is (always, over an fp32 model).
  const bool fp32_norm = node.op == graph::op::kNorm && weights == AutocastWeights::kFp32Model;
  // GemmaRMSNorm and torchtune's RMSNorm multiply the fp32 normalized tensor by the
  // weight and return output.type_as(x): the input's dtype, whatever the weight's.
  const bool casts_back = node.op == graph::op::kNorm && weights == AutocastWeights::kSixteenBitModel &&
                          std::any_of(node.outputs.begin(), node.outputs.end(), [&](const std::string& out) {
                            return out == node.name + ":normalized" && fp32.tensor(out).dtype == DType::kF32;
                          });
  return (owns_fp32 && !keeps_input_dtype && !casts_back) || fp32_norm;
}

// Output dtypes, producers first (the builders create nodes in execution order).
// An op autocast does not cast runs in its inputs' promoted dtype; one that owns
// an fp32 parameter (norm weights, embeddings) or is on autocast's fp32 list
// (layer_norm, softmax) yields fp32.
void promote_outputs(const graph::LayerGraph& graph, Fp32Tensors& fp32) {
  const auto is_f32 = [&](const std::string& name) { return fp32.is_f32(name); };
  for (const graph::Node& node : graph.nodes) {
    const bool f32_input = std::any_of(node.inputs.begin(), node.inputs.end(), is_f32);
    if (runs_in_16_bit(node.op)) {
      // A 4-bit linear copies its result back to its input's dtype (copy_four_bit_output).
      if (four_bit_weight(node) != nullptr && is_f32(node.inputs.front())) fp32.make_f32(node.outputs.front());
      continue;
    }
    // An explicit .to(query.dtype) (eager attention's fp32 softmax cast back): the
    // dtype of the 16-bit projections, whatever its input.
    if (node.op == graph::op::kCast) continue;
    if (!(runs_in_fp32(node) || params_make_fp32(node, fp32) || f32_input)) continue;
    for (const std::string& output : node.outputs) {
      // LlamaRMSNorm multiplies its weight by hidden_states.to(input_dtype): the tensor
      // the weight's gradient keeps is the input's dtype, 16-bit after a 16-bit linear
      // (Qwen3's q_norm and k_norm under AMP; modeling_qwen3.py Qwen3RMSNorm, 5.23.0).
      const bool input_dtype_normalized = output == node.name + ":normalized" && !fp32.tensor(output).dtype;
      if (input_dtype_normalized && !f32_input) continue;
      fp32.make_f32(output);
    }
  }
}

// The elements autocast casts of an fp32 `input` to `node`: the tensor the op is given.
// A linear given fewer rows than the tensor holds reads a view of them (the class token,
// `sequence_output[:, 0, :]`, transformers 5.23.0 modeling_vit.py
// ViTForImageClassification.forward; BertPooler's `hidden_states[:, 0]`), and autocast
// copies that view only (torch 2.11 aten/src/ATen/autocast_mode.h, cached_cast:
// `arg.to(dtype)` of the argument as passed), not the tensor under it.
graph::SizeExpr cast_elements(const graph::Node& node, const std::string& input, const Fp32Tensors& fp32) {
  if (node.linear && node.inputs.front() == input) return node.linear->rows.scaled(node.linear->in_features);
  return fp32.tensor(input).elements;
}

// Casts in front of a lower-precision op: its weight, and its fp32 inputs.
void cast_16_bit_op_inputs(std::vector<graph::Node>& nodes, std::vector<graph::Tensor>& tensors, graph::Node& node,
                           const Fp32Tensors& fp32) {
  const graph::Param* four_bit = four_bit_weight(node);
  const bool four_bit_f32_input = four_bit != nullptr && fp32.is_f32(node.inputs.front());
  for (std::string& input : node.inputs) {
    if (!fp32.is_f32(input)) continue;
    const std::string name = node.name + ".cast:" + input;
    add_cast(nodes, tensors, name, node.block, {input}, cast_elements(node, input, fp32));
    read_through_cast(node, input, name);
  }
  if (four_bit_f32_input) copy_four_bit_output(node);
  if (four_bit != nullptr && !four_bit_f32_input) {
    // Linear4bit casts its bias to its input's dtype in place at its first call
    // (bitsandbytes/nn/modules.py: self.bias.data = self.bias.data.to(x.dtype)).
    for (graph::Param& param : node.params) {
      if (param.name == node.name + ".bias") param.upcast_fp32 = false;
    }
  }
  if (const graph::Param* weight = matmul_weight(node, fp32.weights())) {
    const std::string name = node.name + ".weight_cast";
    add_cast(nodes, tensors, name, node.block, {}, graph::SizeExpr::constant(weight->elements()));
    node.inputs.push_back(name);
    // The matmul keeps the 16-bit weight for its input gradient (mm backward: dx = dy W).
    // A convolution keeps it whenever it is on the graph: one formula gives all its
    // gradients (torch 2.11 tools/autograd/derivatives.yaml, convolution: `input, weight,
    // bias: convolution_backward(grad, input, weight, ...)`), so ConvolutionBackward0
    // saves input and weight together, a frozen input's too (the oracle's CLIP full
    // bf16-amp rows: the patch embedding's [768, 3, 32, 32] bf16 cast saved to the end).
    const bool conv = node.op == graph::op::kConv2d || node.op == graph::op::kConv3d;
    node.saves.push_back({name, conv ? graph::SaveWhen::kAnyGrad : graph::SaveWhen::kInputGrad});
  }
  copy_adapter_input(nodes, tensors, node);
}

// An fp32 graph input that a node holds, over a 16-bit model, is held as the model's
// own 16-bit copy of it: the only such hold is ViTModel.forward's, which rebinds
// pixel_values to `pixel_values.to(expected_dtype)` before the patch projection and
// keeps it to the end of its forward (transformers 5.23.0 modeling_vit.py;
// models/vision.cc). The first cast read from it is that copy, held in its place.
void hold_model_casts_of_inputs(graph::LayerGraph& graph) {
  std::map<std::string, std::string> copy_of;  // fp32 input -> the first cast reading it
  for (const graph::Node& node : graph.nodes) {
    if (node.op == graph::op::kCast && node.inputs.size() == 1) copy_of.try_emplace(node.inputs.front(), node.name);
  }
  std::set<std::string> inputs;  // graph inputs: tensors no node makes
  for (const graph::Tensor& tensor : graph.tensors) inputs.insert(tensor.name);
  for (const graph::Node& node : graph.nodes) {
    for (const std::string& output : node.outputs) inputs.erase(output);
  }
  for (graph::Node& node : graph.nodes) {
    for (std::string& held : node.holds) {
      const auto copy = copy_of.find(held);
      if (copy != copy_of.end() && inputs.contains(held)) held = copy->second;
    }
  }
}

}  // namespace

void add_cast_node(std::vector<graph::Node>& nodes, std::vector<graph::Tensor>& tensors, const std::string& name,
                   int block, std::vector<std::string> inputs, graph::SizeExpr elements,
                   std::optional<graph::DType> dtype, graph::SizeExpr io_elements) {
  graph::Node cast;
  cast.name = name;
  cast.op = "cast";
  cast.block = block;
  cast.inputs = std::move(inputs);
  cast.outputs = {name};
  cast.fwd_io_elements = std::move(io_elements);
  tensors.push_back(graph::Tensor{name, std::move(elements), dtype, false});
  nodes.push_back(std::move(cast));
}

// A Python RMSNorm over an fp32 input: its .to(float32) returns x itself (a
// same-dtype .to is no copy), so what it keeps as ":x32" is x. T5LayerNorm keeps x for
// x * rsqrt(...) besides (models/t5.cc): one tensor is kept. LlamaRMSNorm keeps only
// the upcast for pow and the multiply by rsqrt (transformers 5.23.0
// models/llama/modeling_llama.py LlamaRMSNorm.forward: `hidden_states =
// hidden_states.to(torch.float32)`): it keeps x, and ":x32" is no tensor of its own
// (python_norm_backward.h still runs its backward chain). Under bf16-amp the decoder
// layer's input is the checkpoint's saved input, and the recompute upcasts nothing
// beside it (the oracle's Mistral-7B and Phi-3 rows at 2 x 2048: one fp32 [B, S, h] less
// in layer 0's backward).
void drop_aliased_upcasts(graph::LayerGraph& graph, Fp32Tensors& fp32) {
  for (graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kNorm || node.inputs.empty() || !fp32.is_f32(node.inputs.front())) continue;
    const std::string x32 = node.name + ":x32";
    const std::string& x = node.inputs.front();
    const auto saves = [&](const std::string& name) {
      return std::any_of(node.saves.begin(), node.saves.end(),
                         [&](const graph::SavedRef& saved) { return saved.tensor == name; });
    };
    if (saves(x)) {
      std::erase_if(node.saves, [&](const graph::SavedRef& saved) { return saved.tensor == x32; });
    } else if (saves(x32)) {
      for (graph::SavedRef& saved : node.saves) {
        if (saved.tensor == x32) saved.tensor = x;
      }
      fp32.by_name().at(x32)->elements = graph::SizeExpr{};
    }
  }
}

void apply_autocast(graph::LayerGraph& graph, AutocastWeights weights, DType low) {
  Fp32Tensors fp32(graph, weights);
  promote_outputs(graph, fp32);
  drop_aliased_upcasts(graph, fp32);
  // Casts in front of each op autocast runs in fp32 or in 16 bits.
  std::vector<graph::Node> rewritten;
  std::vector<graph::Tensor> added;
  rewritten.reserve(graph.nodes.size() * 2);
  for (graph::Node node : graph.nodes) {
    if (runs_in_fp32(node)) {
      upcast_fp32_op_inputs(rewritten, added, node, fp32.by_name(), weights, low);
    } else if (runs_in_16_bit(node.op)) {
      cast_16_bit_op_inputs(rewritten, added, node, fp32);
    }
    rewritten.push_back(std::move(node));
  }
  graph.nodes = std::move(rewritten);
  graph.tensors.insert(graph.tensors.end(), added.begin(), added.end());
  if (weights == AutocastWeights::kSixteenBitModel) hold_model_casts_of_inputs(graph);
}

void apply_autocast_to_fp32_adapters(graph::LayerGraph& graph) {
  std::vector<graph::Node> rewritten;
  std::vector<graph::Tensor> added;
  rewritten.reserve(graph.nodes.size() * 2);
  for (graph::Node& node : graph.nodes) {
    if (node.op == graph::op::kLinear) {
      // Copied in node.params order (lora_A, then lora_B), so the loop below may
      // not hold references into node.params while nodes grow.
      std::vector<std::pair<std::string, int64_t>> adapters;
      for (const graph::Param& param : node.params) {
        if (is_lora_adapter(param) && param.trainable && param.dtype == DType::kF32) {
          adapters.emplace_back(param.name, param.elements());
        }
      }
      for (const auto& [param, elements] : adapters) {
        const bool lora_a = param.ends_with(".lora_A.weight");
        const std::string name = node.name + (lora_a ? ".adapter_cast_a" : ".adapter_cast_b");
        add_cast(rewritten, added, name, node.block, {}, graph::SizeExpr::constant(elements));
        node.inputs.push_back(name);
        // Each matmul keeps its 16-bit weight for its input's gradient: lora_A's
        // input is x (needed when x requires grad), lora_B's is x·A (needed
        // whenever A trains).
        node.saves.push_back({name, lora_a ? graph::SaveWhen::kInputGrad : graph::SaveWhen::kAnyGrad});
      }
    }
    copy_adapter_input(rewritten, added, node);
    rewritten.push_back(std::move(node));
  }
  graph.nodes = std::move(rewritten);
  graph.tensors.insert(graph.tensors.end(), added.begin(), added.end());
}

void apply_fp32_adapters_without_autocast(graph::LayerGraph& graph) {
  std::map<std::string, graph::Tensor*> tensors;
  for (graph::Tensor& tensor : graph.tensors) tensors[tensor.name] = &tensor;
  const auto set_f32 = [&](const std::string& name) {
    const auto found = tensors.find(name);
    if (found != tensors.end()) found->second->dtype = DType::kF32;
  };
  std::vector<graph::Node> rewritten;
  std::vector<graph::Tensor> added;
  rewritten.reserve(graph.nodes.size() + graph.nodes.size() / 4);
  for (graph::Node& node : graph.nodes) {
    if (node.op == graph::op::kLinear && node.linear && !node.inputs.empty() && has_fp32_adapters(node)) {
      set_f32(node.name + ".lora_mid");
      set_f32(node.name + ".dora_lora_result");  // DoRA (dora.h): B(A(x)) in fp32
      if (has_lora_dropout(node)) {
        set_f32(node.name + ".lora_dropout_out");  // dropout of the fp32 copy
        // DoRA's second base matmul: fp32 x times W.to(fp32), which it keeps
        set_f32(node.name + ".dora_base_result");
        set_f32(node.name + ".dora_weight_copy");
      } else if (tensors.at(node.inputs.front())->dtype != DType::kF32) {
        keep_own_adapter_input(rewritten, added, node, DType::kF32);
      }
    }
    rewritten.push_back(std::move(node));
  }
  graph.nodes = std::move(rewritten);
  graph.tensors.insert(graph.tensors.end(), added.begin(), added.end());
}

std::vector<bool> autocast_cached_casts(const graph::LayerGraph& graph) {
  // Run for every plan the search simulates: hashed views of the graph's names,
  // and the node's own casts found by suffix before any lookup.
  std::unordered_map<std::string_view, size_t> index;
  index.reserve(graph.tensors.size());
  for (size_t t = 0; t < graph.tensors.size(); ++t) index.emplace(graph.tensors[t].name, t);
  std::vector<bool> cached(graph.tensors.size(), false);
  for (const graph::Node& node : graph.nodes) {
    const auto own = [&](std::string_view input, std::string_view suffix) {
      return input.size() == node.name.size() + suffix.size() && input.starts_with(node.name) &&
             input.ends_with(suffix);
    };
    const auto trainable_weight = [&] {
      return std::any_of(node.params.begin(), node.params.end(), [&](const graph::Param& p) {
        return p.trainable && own(p.name, ".weight");
      });
    };
    for (const std::string& input : node.inputs) {
      const bool weight = own(input, ".weight_cast") && trainable_weight();
      const bool adapter = own(input, ".adapter_cast_a") || own(input, ".adapter_cast_b");
      if (!weight && !adapter) continue;
      const auto found = index.find(input);
      if (found != index.end()) cached[found->second] = true;
    }
  }
  return cached;
}

int64_t autocast_cached_bias_elements(const graph::Node& node) {
  const std::string weight_cast = node.name + ".weight_cast";
  if (std::find(node.inputs.begin(), node.inputs.end(), weight_cast) == node.inputs.end()) return 0;
  int64_t elements = 0;
  for (const graph::Param& p : node.params) {
    if (p.name == node.name + ".bias" && p.trainable && p.tied_to.empty() && !p.upcast_fp32) {
      elements += p.elements();
    }
  }
  return elements;
}

}  // namespace headroom::planner
