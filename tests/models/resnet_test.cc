// ResNet-50 with BatchNorm (models/resnet.h): torchvision's names and counts,
// what one Bottleneck keeps by hand, the whole network against what PyTorch's
// autograd keeps, and the transformers config.json path.
#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "graph/validate.h"
#include "models/hf_import.h"
#include "models/resnet.h"
#include "models/zoo.h"
#include "saved_bytes.h"

namespace headroom::models {
namespace {

graph::LayerGraph zoo(const std::string& name) {
  Result<graph::LayerGraph> g = build_zoo_model(name, {});
  REQUIRE_MESSAGE(g.is_ok(), g.message());
  return g.value();
}

const graph::Param* find_param(const graph::LayerGraph& g, const std::string& name) {
  for (const graph::Node& node : g.nodes) {
    for (const graph::Param& p : node.params) {
      if (p.name == name) return &p;
    }
  }
  return nullptr;
}

struct StateDict {
  int64_t parameters = 0, buffers = 0, buffer_elements = 0;
};

StateDict state_dict(const graph::LayerGraph& g) {
  StateDict out;
  for (const graph::Node& node : g.nodes) {
    for (const graph::Param& p : node.params) {
      if (!p.buffer) {
        ++out.parameters;
        continue;
      }
      ++out.buffers;
      out.buffer_elements += p.elements();
    }
  }
  return out;
}

// Bytes of the tensors a set of nodes keeps at (batch, seq), each tensor once,
// unset dtypes as float32 (fp32 training). `skip_from_other_blocks`: leave out
// tensors produced in another block (the block's input, counted where it is made).
int64_t kept_bytes_fp32(const graph::LayerGraph& g, int block, int64_t batch, int64_t seq) {
  std::set<std::string> seen;
  int64_t total = 0;
  for (const graph::Node& node : g.nodes) {
    if (block >= 0 && node.block != block) continue;
    for (const graph::SavedRef& saved : node.saves) {
      if (!seen.insert(saved.tensor).second) continue;
      const int producer = g.producer_of(saved.tensor);
      if (block >= 0 && (producer < 0 || g.nodes[producer].block != block)) continue;
      const graph::Tensor* t = g.find_tensor(saved.tensor);
      total += graph::dtype_bytes(t->dtype.value_or(graph::DType::kF32), t->elements.at(batch, seq));
    }
  }
  return total;
}

TEST_CASE("resnet-50 has torchvision's 25,557,032 parameters under torchvision's names") {
  const graph::LayerGraph g = zoo("resnet-50");
  CHECK(graph::validate_graph(g, "resnet-50").is_ok());
  // sum(p.numel() for p in torchvision.models.resnet50().parameters())
  CHECK(g.parameter_count() == 25557032);
  CHECK(g.trainable_parameter_count() == 25557032);
  // resnet50().state_dict(): 161 parameters and 159 buffers (53 BatchNorm2d x
  // running_mean, running_var, num_batches_tracked: 53,173 elements).
  const StateDict sd = state_dict(g);
  CHECK(sd.parameters == 161);
  CHECK(sd.buffers == 159);
  CHECK(sd.buffer_elements == 53173);
  for (const char* name : {"conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight", "layer1.0.bn3.bias",
                           "layer1.0.downsample.0.weight", "layer2.0.conv2.weight", "layer4.2.bn3.weight",
                           "fc.weight", "fc.bias"}) {
    const graph::Param* p = find_param(g, name);
    REQUIRE_MESSAGE(p != nullptr, name);
    CHECK(p->trainable);
    CHECK_FALSE(p->buffer);
  }
  const graph::Param* mean = find_param(g, "layer1.0.downsample.1.running_mean");
  REQUIRE(mean != nullptr);
  CHECK(mean->buffer);
  CHECK_FALSE(mean->trainable);
  CHECK(mean->dtype == graph::DType::kF32);
  const graph::Param* tracked = find_param(g, "bn1.num_batches_tracked");
  REQUIRE(tracked != nullptr);
  CHECK(tracked->dtype == graph::DType::kInt64);
  CHECK(tracked->shape.empty());
  // v1.5: the stride is on the 3x3 conv, so layer2.0.conv1 is [128, 256, 1, 1] and the 3x3 [128, 128, 3, 3].
  CHECK(find_param(g, "layer2.0.conv1.weight")->shape == std::vector<int64_t>{128, 256, 1, 1});
  CHECK(find_param(g, "layer2.0.conv2.weight")->shape == std::vector<int64_t>{128, 128, 3, 3});
  CHECK(find_param(g, "fc.weight")->shape == std::vector<int64_t>{1000, 2048});
  CHECK(g.blocks.size() == 1 + 16 + 1);  // stem, 3 + 4 + 6 + 3 Bottlenecks, head
  CHECK_FALSE(g.blocks.front().checkpointable);
  CHECK(g.blocks[1].name == "layer1.0");
  CHECK(g.blocks[1].checkpointable);
  CHECK(g.sequence.default_seq == 49);  // (224 / 32)^2: the last feature map
}

TEST_CASE("tiny-resnet is torchvision's ResNet of one Bottleneck a stage at width 8") {
  const graph::LayerGraph g = zoo("tiny-resnet");
  CHECK(graph::validate_graph(g, "tiny-resnet").is_ok());
  // torchvision ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10) with inplanes 8 (counted with torch 2.11).
  CHECK(g.parameter_count() == 130962);
  CHECK(state_dict(g).buffer_elements == 2433);
  CHECK(g.sequence.default_seq == 1);  // 32 px: a 1x1 final map
}

TEST_CASE("one Bottleneck keeps two tensors per conv and bn pair, by hand") {
  // layer1.1 at batch 2, 224 px (S = 49, a 56 x 56 map), float32. conv1 -> bn1
  // -> relu_ keeps the conv output (bn1's input) and the relu output (relu_'s
  // result, which conv2 reads); likewise conv2; conv3 -> bn3 -> += -> relu_
  // keeps conv3's output and the block output. The block input is layer1.0's
  // output, counted there. BatchNorm adds save_mean and save_invstd, float32 per channel.
  const graph::LayerGraph g = zoo("resnet-50");
  const int block = testing::block_index(g, "layer1.1");
  REQUIRE(block >= 0);
  const int64_t map = 56 * 56;
  const int64_t by_hand = 4 * (2 * 64 * map * 4) + 2 * (2 * 256 * map * 4) + 2 * (64 + 64 + 256) * 4;
  CHECK(by_hand == 19270656);
  CHECK(kept_bytes_fp32(g, block, 2, 49) == by_hand);
  // The same tensors PyTorch 2.11's saved_tensors_hooks see for torchvision's
  // layer1[1] (data pointers, parameters and buffers left out): 19,270,656 bytes.
}

TEST_CASE("resnet-50 keeps what PyTorch's autograd keeps, whole network") {
  // torchvision resnet50 (re-typed: Bottleneck v1.5, ReLU(inplace=True)) in
  // train mode, batch 2, 224 px, float32, plus cross_entropy: the unique
  // storages that saved_tensors_hooks saw, parameters and buffers left out, were
  // 172,039,508 bytes (torch 2.11, CPU; the CUDA kernels keep the same tensors).
  // The graph differs only at the loss: it keeps the 8,000-byte logits where
  // log_softmax keeps its 8,000-byte result and nll_loss the 16-byte int64
  // targets (a graph input here) and a 4-byte total_weight.
  const graph::LayerGraph g = zoo("resnet-50");
  CHECK(kept_bytes_fp32(g, -1, 2, 49) == 172039508 - 16 - 4);
}

TEST_CASE("transformers' ResNetConfig builds the same network under HF's names") {
  nlohmann::json labels = nlohmann::json::object();
  for (int i = 0; i < 1000; ++i) labels[std::to_string(i)] = "class " + std::to_string(i);
  // microsoft/resnet-50's config.json, abridged: the sizes are ResNetConfig's defaults.
  const nlohmann::json config = {{"model_type", "resnet"},  {"architectures", {"ResNetForImageClassification"}},
                                 {"embedding_size", 64},    {"hidden_sizes", {256, 512, 1024, 2048}},
                                 {"depths", {3, 4, 6, 3}},  {"layer_type", "bottleneck"},
                                 {"hidden_act", "relu"},    {"downsample_in_first_stage", false},
                                 {"num_channels", 3},       {"id2label", labels}};
  Result<graph::LayerGraph> g = graph_from_hf_config(config, "config.json", {});
  REQUIRE_MESSAGE(g.is_ok(), g.message());
  CHECK(g->parameter_count() == 25557032);
  CHECK(state_dict(g.value()).buffer_elements == 53173);
  for (const char* name : {"resnet.embedder.embedder.convolution.weight", "resnet.embedder.embedder.normalization.running_var",
                           "resnet.encoder.stages.0.layers.0.shortcut.convolution.weight",
                           "resnet.encoder.stages.1.layers.0.layer.1.convolution.weight",
                           "resnet.encoder.stages.3.layers.2.layer.2.normalization.num_batches_tracked",
                           "classifier.1.weight", "classifier.1.bias"}) {
    CHECK_MESSAGE(find_param(g.value(), name) != nullptr, name);
  }
  // downsample_in_bottleneck false: the stride on the 3x3 (layer.1), as torchvision v1.5.
  CHECK(find_param(g.value(), "resnet.encoder.stages.1.layers.0.layer.0.convolution.weight")->shape ==
        std::vector<int64_t>{128, 256, 1, 1});
  // transformers' ReLU is not in place: a node of its own, and the same bytes kept.
  const graph::LayerGraph tv = zoo("resnet-50");
  CHECK(kept_bytes_fp32(g.value(), -1, 2, 49) == kept_bytes_fp32(tv, -1, 2, 49));
  CHECK(g->find_node("resnet.encoder.stages.0.layers.0.layer.0.activation") != nullptr);
}

TEST_CASE("a basic-block ResNetConfig is ResNet-18") {
  const nlohmann::json config = {{"model_type", "resnet"},        {"hidden_sizes", {64, 128, 256, 512}},
                                 {"depths", {2, 2, 2, 2}},        {"layer_type", "basic"},
                                 {"id2label", nlohmann::json::object()}};
  nlohmann::json with_labels = config;
  for (int i = 0; i < 1000; ++i) with_labels["id2label"][std::to_string(i)] = "c";
  Result<graph::LayerGraph> g = graph_from_hf_config(with_labels, "config.json", {});
  REQUIRE_MESSAGE(g.is_ok(), g.message());
  // microsoft/resnet-18 and torchvision resnet18: 11,689,512 parameters.
  CHECK(g->parameter_count() == 11689512);
  CHECK(graph::validate_graph(g.value(), "config.json").is_ok());
}

TEST_CASE("ResNetConfig fields the builder cannot honour are refused by name") {
  auto error = [](nlohmann::json config) {
    config["model_type"] = "resnet";
    Result<graph::LayerGraph> g = graph_from_hf_config(config, "config.json", {});
    return g.is_ok() ? std::string() : g.message();
  };
  CHECK(error({{"downsample_in_first_stage", true}}).find("downsample_in_first_stage") != std::string::npos);
  CHECK(error({{"hidden_sizes", {256, 512, 1024}}}).find("hidden_sizes") != std::string::npos);
  CHECK(error({{"depths", {3, 4, -6, 3}}}).find("depths") != std::string::npos);
  CHECK(error({{"layer_type", "wide"}}).find("layer_type") != std::string::npos);
  CHECK(error({{"hidden_act", "gelu"}}).find("hidden_act") != std::string::npos);
  CHECK(error({{"hidden_sizes", {256, 512, 1024, 2050}}}).find("multiples of 4") != std::string::npos);
  CHECK(error(nlohmann::json::object()).empty());
}

}  // namespace
}  // namespace headroom::models
