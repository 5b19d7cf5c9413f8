// ResNet as torchvision and transformers build it (models/resnet.h). What each
// op keeps for backward follows tools/autograd/derivatives.yaml (PyTorch 2.11):
//
// - convolution: one formula for input, weight and bias
//   (convolution_backward(grad, input, weight, ...)), so the input is kept
//   whenever the node is on the autograd graph, whichever gradient is wanted
//   (the weight is a parameter: no extra bytes).
// - batch norm in training (_batch_norm_with_update, cudnn_batch_norm,
//   native_batch_norm): the input, the weight, the running statistics (buffers)
//   and the per-channel float32 save_mean and save_invstd (result1, result2);
//   cuDNN's reserve space (result3) is empty for a plain BN in NCHW (no fused
//   activation), so not counted. Not its output.
// - relu / relu_: threshold_backward(grad, result): the output. torchvision's
//   nn.ReLU(inplace=True) writes into the batch norm's output, which the batch
//   norm does not keep, so conv -> bn -> relu keeps two tensors: the conv output
//   (kept by the bn) and the relu output (kept by the relu and the next conv).
//   `out += identity` is in place too. The in-place ops are one node with the
//   batch norm here, so that one storage is one tensor; transformers' ReLU is
//   not in place (a new tensor, the bn output freed after it), a node of its own.
// - max_pool2d_with_indices: the input and the int64 indices (result1).
// - _adaptive_avg_pool2d: its input (for its shape; the block's output, kept anyway).
#include "models/resnet.h"

#include <string>

#include "models/conv2d.h"
#include "models/graph_builder.h"
#include "models/layers.h"

namespace headroom::models {
namespace {

// The stride of the last stage: S = (resolution / kFinalStride)^2.
constexpr int64_t kFinalStride = 32;

// FLOP weights of batch norm per element, as the norms of graph_builder.cc
// count them (memory bound: the roofline prices the traffic, not these).
constexpr int64_t kBatchNormFwdFlopsPerElement = 5;  // mean, var, sub, mul, scale
constexpr int64_t kBatchNormBwdFlopsPerElement = 8;
constexpr int64_t kBatchNormParamFlopsPerElement = 2;  // the dgamma and dbeta reductions
// Max pooling compares a 3x3 window per output.
constexpr int64_t kMaxPoolWindow = 9;

// Elements of a feature map of `channels` at total stride `stride`, per token
// of the final map: channels * (32 / stride)^2 * B * S.
SizeExpr feature_map(int64_t channels, int64_t stride) {
  const int64_t side = kFinalStride / stride;
  return SizeExpr::per_token(channels * side * side);
}

// What runs after a batch norm, in the same storage when in place.
enum class Tail { kNone, kRelu, kAddRelu };

// Module names of one residual block, in the naming of `ResNetNames`.
struct BlockNames {
  std::string block;
  std::string conv[3], bn[3], relu[3];  // per conv layer
  std::string down_conv, down_bn;       // the projection shortcut
  std::string out_relu;                 // after the residual add
};

BlockNames block_names(ResNetNames style, int64_t stage, int64_t index) {
  BlockNames n;
  if (style == ResNetNames::kTorchvision) {
    n.block = "layer" + std::to_string(stage + 1) + "." + std::to_string(index);
    for (int k = 0; k < 3; ++k) {
      n.conv[k] = n.block + ".conv" + std::to_string(k + 1);
      n.bn[k] = n.block + ".bn" + std::to_string(k + 1);
      n.relu[k] = n.block + ".relu" + std::to_string(k + 1);
    }
    n.down_conv = n.block + ".downsample.0";
    n.down_bn = n.block + ".downsample.1";
    n.out_relu = n.block + ".relu";
    return n;
  }
  n.block = "resnet.encoder.stages." + std::to_string(stage) + ".layers." + std::to_string(index);
  for (int k = 0; k < 3; ++k) {
    const std::string layer = n.block + ".layer." + std::to_string(k);
    n.conv[k] = layer + ".convolution";
    n.bn[k] = layer + ".normalization";
    n.relu[k] = layer + ".activation";
  }
  n.down_conv = n.block + ".shortcut.convolution";
  n.down_bn = n.block + ".shortcut.normalization";
  n.out_relu = n.block + ".activation";
  return n;
}

class ResNetGraph {
 public:
  ResNetGraph(GraphBuilder& b, const ResNetConfig& c) : b_(b), c_(c) {}

  graph::LayerGraph build() {
    b_.set_param_dtype(DType::kF32);  // both publish float32 checkpoints
    std::string x = stem();
    int64_t in = c_.stem_width;
    int64_t stride = 4;  // after the stem's conv and max pool
    for (size_t stage = 0; stage < c_.depths.size(); ++stage) {
      const int64_t out = c_.widths[stage];
      for (int64_t i = 0; i < c_.depths[stage]; ++i) {
        const int64_t block_stride = (stage > 0 && i == 0) ? 2 : 1;
        x = residual_block(static_cast<int64_t>(stage), i, x, in, out, stride, block_stride);
        stride *= block_stride;
        in = out;
      }
    }
    head(x, in, stride);
    return b_.finish();
  }

 private:
  bool torchvision() const { return c_.names == ResNetNames::kTorchvision; }

  // Conv2d without bias, `kernel` square, writing a map at total stride `out_stride`.
  std::string conv(const std::string& name, const std::string& x, int64_t in, int64_t out, int64_t kernel,
                   int64_t out_stride) {
    return conv2d(b_, name, x, in, out, kernel, feature_map(out, out_stride), false);
  }

  // BatchNorm2d in training mode, with `tail` fused when torchvision runs it in
  // place (transformers: the ReLU follows as a node of its own, `relu_name`).
  std::string batch_norm(const std::string& name, const std::string& x, int64_t channels, int64_t stride, Tail tail,
                         const std::string& identity, const std::string& relu_name) {
    const SizeExpr elements = feature_map(channels, stride);
    const bool inplace_relu = torchvision() && tail != Tail::kNone;
    OpSpec spec;
    spec.name = name;
    spec.op = tail == Tail::kNone ? "batch_norm" : inplace_relu ? (tail == Tail::kRelu ? "batch_norm_relu" : std::string(kBatchNormAddReluOp))
                                                                 : (tail == Tail::kRelu ? "batch_norm" : "batch_norm_add");
    spec.inputs = {x};
    if (tail == Tail::kAddRelu) spec.inputs.push_back(identity);
    spec.out_elements = elements;
    spec.saves = {SavedRef{x, SaveWhen::kAnyGrad}};
    // relu_ keeps its result, which is this node's output storage.
    if (inplace_relu) spec.saves.push_back(SavedRef{name, SaveWhen::kAnyGrad});
    spec.params = {b_.param(name + ".weight", {channels}), b_.param(name + ".bias", {channels})};
    for (const char* stat : {".running_mean", ".running_var"}) spec.params.push_back(buffer(name + stat, {channels}, DType::kF32));
    spec.params.push_back(buffer(name + ".num_batches_tracked", {}, DType::kInt64));
    spec.fwd_flops = elements.scaled(kBatchNormFwdFlopsPerElement + (tail == Tail::kNone ? 0 : 2));
    spec.bwd_input_flops = elements.scaled(kBatchNormBwdFlopsPerElement + (tail == Tail::kNone ? 0 : 1));
    spec.bwd_param_flops = elements.scaled(kBatchNormParamFlopsPerElement);
    const std::string y = b_.op(spec);
    // Traffic: the statistics pass and the normalizing pass read x, one write;
    // an in-place add reads two and writes one, an in-place relu reads and writes.
    graph::Node& node = b_.mutable_graph().nodes.back();
    node.fwd_io_elements = elements.scaled(3 + (tail == Tail::kAddRelu ? 3 : 0) + (inplace_relu ? 2 : 0));
    // save_mean and save_invstd: float32, one per channel, whatever the batch.
    for (const char* stat : {":save_mean", ":save_invstd"}) {
      const std::string tensor = name + stat;
      node.outputs.push_back(tensor);
      node.saves.push_back(SavedRef{tensor, SaveWhen::kAnyGrad});
      b_.input(tensor, SizeExpr::constant(channels), DType::kF32, false);
    }
    if (tail == Tail::kNone || inplace_relu) return y;
    return b_.activation(relu_name, y, elements, "relu");
  }

  Param buffer(const std::string& name, std::vector<int64_t> shape, DType dtype) const {
    Param p = b_.param(name, std::move(shape));
    p.dtype = dtype;
    p.trainable = false;
    p.buffer = true;
    return p;
  }

  std::string stem() {
    b_.begin_block(torchvision() ? "stem" : "resnet.embedder", "resnet_stem", false);
    const std::string pixels = b_.input("pixel_values", feature_map(3, 1), std::nullopt, false);
    const std::string p = torchvision() ? "" : "resnet.embedder.embedder.";
    std::string x = conv(p + (torchvision() ? "conv1" : "convolution"), pixels, 3, c_.stem_width, 7, 2);
    x = batch_norm(p + (torchvision() ? "bn1" : "normalization"), x, c_.stem_width, 2, Tail::kRelu, "",
                   p + "activation");
    const std::string pool = torchvision() ? "maxpool" : "resnet.embedder.pooler";
    const SizeExpr pooled = feature_map(c_.stem_width, 4);
    OpSpec spec{pool, "max_pool", {x}, pooled, std::nullopt,
                {SavedRef{x, SaveWhen::kInputGrad}, SavedRef{pool + ":indices", SaveWhen::kInputGrad}}, {},
                pooled.scaled(kMaxPoolWindow), feature_map(c_.stem_width, 2), {}, {}};
    const std::string y = b_.op(spec);
    graph::Node& node = b_.mutable_graph().nodes.back();
    node.outputs.push_back(pool + ":indices");
    node.fwd_io_elements += pooled;
    b_.input(pool + ":indices", pooled, DType::kInt64, false);
    return y;
  }

  std::string residual_block(int64_t stage, int64_t index, const std::string& x, int64_t in, int64_t out,
                             int64_t stride, int64_t block_stride) {
    const BlockNames n = block_names(c_.names, stage, index);
    b_.begin_block(n.block, c_.bottleneck ? "resnet_bottleneck" : "resnet_basic", true);
    const int64_t out_stride = stride * block_stride;
    std::string h;
    int last = 1;
    if (c_.bottleneck) {
      const int64_t inner = out / 4;
      const int64_t mid_stride = c_.stride_in_1x1 ? out_stride : stride;
      h = conv(n.conv[0], x, in, inner, 1, mid_stride);
      h = batch_norm(n.bn[0], h, inner, mid_stride, Tail::kRelu, "", n.relu[0]);
      h = conv(n.conv[1], h, inner, inner, 3, out_stride);
      h = batch_norm(n.bn[1], h, inner, out_stride, Tail::kRelu, "", n.relu[1]);
      h = conv(n.conv[2], h, inner, out, 1, out_stride);
      last = 2;
    } else {
      h = conv(n.conv[0], x, in, out, 3, out_stride);
      h = batch_norm(n.bn[0], h, out, out_stride, Tail::kRelu, "", n.relu[0]);
      h = conv(n.conv[1], h, out, out, 3, out_stride);
    }
    std::string identity = x;
    if (in != out || block_stride != 1) {
      identity = conv(n.down_conv, x, in, out, 1, out_stride);
      identity = batch_norm(n.down_bn, identity, out, out_stride, Tail::kNone, "", "");
    }
    // The shortcut is built before the last batch norm so that the add and the
    // ReLU can be that node: the live set at it is the one PyTorch has when the
    // shortcut's output meets the last batch norm's output.
    return batch_norm(n.bn[last], h, out, out_stride, Tail::kAddRelu, identity, n.out_relu);
  }

  void head(const std::string& x, int64_t channels, int64_t stride) {
    b_.begin_block("head", "classifier", false);
    const std::string pool = torchvision() ? "avgpool" : "resnet.pooler";
    OpSpec spec{pool, "avg_pool", {x}, SizeExpr::per_sample(channels), std::nullopt,
                {SavedRef{x, SaveWhen::kInputGrad}}, {}, feature_map(channels, stride),
                feature_map(channels, stride), {}, {}};
    const std::string pooled = b_.op(spec);
    const std::string labels = b_.input("labels", SizeExpr::per_sample(1), DType::kInt64, false);
    add_classifier_loss(b_, torchvision() ? "fc" : "classifier.1", labels, pooled, channels, c_.classes);
  }

  GraphBuilder& b_;
  const ResNetConfig& c_;
};

}  // namespace

graph::LayerGraph build_resnet(const ResNetConfig& config, const ZooOptions& /*options*/) {
  GraphBuilder b;
  return ResNetGraph(b, config).build();
}

}  // namespace headroom::models
