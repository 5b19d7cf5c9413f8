#include "planner/configs/mmpretrain_import.h"

#include <set>
#include <string>
#include <vector>

#include "planner/configs/mmengine_config.h"

namespace headroom::planner {
namespace {

using nlohmann::json;
using Reader = MmengineReader;

// A backbone the zoo builds, as mmpretrain configures it.
struct ZooBackbone {
  const char* type;       // backbone.type
  int64_t depth;          // backbone.depth
  const char* zoo;        // the zoo model
  std::vector<int64_t> stage_blocks;  // residual blocks per stage (ResNet.arch_settings)
  int64_t feature_channels;           // the head's in_channels
};

// mmpretrain/models/backbones/resnet.py: ResNet.arch_settings[50] is
// (Bottleneck, (3, 4, 6, 3)); with style='pytorch' (the default) the stride of
// a Bottleneck is on its 3x3 conv (conv2_stride = stride), the 7x7 stem and the
// 1x1 strided downsample conv are torchvision's: torchvision's resnet50, v1.5,
// which is the zoo's resnet-50 (models/resnet.h).
const ZooBackbone kBackbones[] = {
    {"ResNet", 50, "resnet-50", {3, 4, 6, 3}, 2048},
};

// ImageNet-1k: the zoo's classifiers' heads.
constexpr int64_t kZooClasses = 1000;

// An int or a square [w, h] (mmcv's scale / crop_size): the side in pixels.
std::optional<int64_t> square_side(const json& value) {
  if (value.is_number_integer() && value.get<int64_t>() > 0) return value.get<int64_t>();
  if (value.is_array() && value.size() == 2 && value[0].is_number_integer() && value[0] == value[1] &&
      value[0].get<int64_t>() > 0) {
    return value[0].get<int64_t>();
  }
  return std::nullopt;
}

// The training image size: the last transform of the pipeline that sets it
// (mmpretrain/datasets/transforms/processing.py RandomResizedCrop `scale`,
// EfficientNetRandomCrop `scale`, RandomCrop / CenterCrop `crop_size`; mmcv
// Resize `scale` without keep_ratio). Dataset wrappers (RepeatDataset,
// ClassBalancedDataset) hold the dataset under `dataset`.
Status read_image_size(Reader& r, const json& loader, RunSettings& s) {
  const json* dataset = Reader::at(loader, "dataset");
  std::string path = "train_dataloader.dataset";
  for (int depth = 0; dataset != nullptr && Reader::at(*dataset, "pipeline") == nullptr &&
                      Reader::at(*dataset, "dataset") != nullptr && depth < 4;
       ++depth) {
    dataset = Reader::at(*dataset, "dataset");
    path += ".dataset";
  }
  const json* pipeline = dataset != nullptr ? Reader::at(*dataset, "pipeline") : nullptr;
  if (pipeline == nullptr || !pipeline->is_array()) {
    return r.fail(path + ".pipeline", "the training pipeline (a list of transforms), which sets the image size");
  }
  int64_t side = 0;  // 0: not fixed (yet)
  std::string setter;
  for (size_t i = 0; i < pipeline->size(); ++i) {
    const json& step = (*pipeline)[i];
    const std::string type = last_name(import_name(Reader::at(step, "type")).value_or(""));
    const std::string at = path + ".pipeline[" + std::to_string(i) + "]";
    const char* key = nullptr;
    if (type == "RandomResizedCrop" || type == "EfficientNetRandomCrop" || type == "Resize") key = "scale";
    if (type == "RandomCrop" || type == "CenterCrop") key = "crop_size";
    if (type == "ResizeEdge") {
      side = 0;  // the short edge only: the size depends on the image until a crop
      setter = at + " ResizeEdge";
      continue;
    }
    if (key == nullptr) continue;
    if (type == "Resize" && is_true(Reader::at(step, "keep_ratio"))) {
      return r.fail(at + ".keep_ratio", "false (a kept aspect ratio makes the size depend on the image)", true);
    }
    const json* value = Reader::at(step, key);
    const std::optional<int64_t> got = value != nullptr ? square_side(*value) : std::nullopt;
    if (!got) return r.fail(at + "." + key, "a square image size (an int, or [w, h] with w == h)", step.value(key, json()));
    side = *got;
    setter = at + " " + type + " " + key + "=" + std::to_string(*got);
  }
  if (side == 0) {
    return r.fail(path + ".pipeline",
                  "a transform that fixes the image size (RandomResizedCrop, RandomCrop, CenterCrop or Resize)" +
                      (setter.empty() ? std::string() : "; the last is " + setter + ", which keeps the aspect ratio"));
  }
  s.resolution = side;
  r.note("image " + std::to_string(side) + " x " + std::to_string(side) + " px: " + setter);
  return Status::ok();
}

// backbone.frozen_stages and backbone.with_cp of a ResNet (resnet.py
// _freeze_stages, Bottleneck.forward).
Status read_resnet_training(Reader& r, const json& backbone, const ZooBackbone& zoo, RunSettings& s) {
  const int64_t stages = static_cast<int64_t>(zoo.stage_blocks.size());
  int64_t frozen = -1;
  if (const json* value = Reader::at(backbone, "frozen_stages")) {
    if (!value->is_number_integer() || value->get<int64_t>() < -1 || value->get<int64_t>() > stages) {
      return r.fail("model.backbone.frozen_stages", "-1 to " + std::to_string(stages), *value);
    }
    frozen = value->get<int64_t>();
  }
  // frozen_stages >= 0 freezes the stem (conv1, norm1: torchvision's conv1, bn1),
  // and 1..frozen_stages the stages layer1..layerN.
  if (frozen >= 0) {
    s.freeze_patterns.push_back("conv1");
    s.freeze_patterns.push_back("bn1");
    for (int64_t stage = 1; stage <= frozen; ++stage) s.freeze_patterns.push_back("layer" + std::to_string(stage) + ".*");
    if (frozen == stages) r.note("model.backbone.frozen_stages " + std::to_string(frozen) + ": only the head trains");
  }
  // with_cp: Bottleneck.forward checkpoints its block only `if self.with_cp and
  // x.requires_grad`. With nothing frozen every block's input comes through the
  // trainable stem; with frozen stages the first trainable block's input needs
  // no gradient, so that block runs plainly and the ones after it recompute.
  const bool with_cp = is_true(Reader::at(backbone, "with_cp"));
  if (!with_cp) {
    s.checkpointing = CheckpointPolicy::kNone;
  } else if (frozen < 0) {
    s.checkpointing = CheckpointPolicy::kEveryBlock;
  } else {
    s.checkpointing = CheckpointPolicy::kList;
    s.checkpoint_blocks.clear();
    bool first = true;
    for (int64_t stage = frozen + 1; stage <= stages; ++stage) {
      for (int64_t i = 0; i < zoo.stage_blocks[stage - 1]; ++i) {
        if (!first) s.checkpoint_blocks.push_back("layer" + std::to_string(stage) + "." + std::to_string(i));
        first = false;
      }
    }
    if (s.checkpoint_blocks.empty()) {
      s.checkpointing = CheckpointPolicy::kNone;
      r.note("model.backbone.with_cp: no block's input needs a gradient, so none is checkpointed");
    } else {
      r.note("model.backbone.with_cp with frozen_stages " + std::to_string(frozen) + ": layer" +
             std::to_string(frozen + 1) + ".0 runs without checkpointing (its input needs no gradient), the " +
             std::to_string(s.checkpoint_blocks.size()) + " blocks after it are checkpointed");
    }
  }
  if (is_true(Reader::at(backbone, "norm_eval"))) {
    r.note("model.backbone.norm_eval: BatchNorm layers use their running statistics; priced as in training mode "
           "(both keep the input for the weight's gradient)");
  }
  return Status::ok();
}

int64_t stages_last(const ZooBackbone& zoo) { return static_cast<int64_t>(zoo.stage_blocks.size()) - 1; }

// Keys of mmpretrain's ResNet that must keep their defaults for the zoo's
// graph (resnet.py ResNet.__init__).
Status check_resnet_defaults(Reader& r, const json& backbone, const ZooBackbone& zoo) {
  struct Default {
    const char* key;
    json value;
    const char* why;
  };
  const std::vector<Default> defaults = {
      {"num_stages", 4, "four stages"},
      {"in_channels", 3, "RGB input"},
      {"stem_channels", 64, "torchvision's stem"},
      {"base_channels", 64, "torchvision's widths"},
      {"expansion", 4, "Bottleneck's expansion"},
      {"strides", json::array({1, 2, 2, 2}), "torchvision's strides"},
      {"dilations", json::array({1, 1, 1, 1}), "no dilation"},
      {"out_indices", json::array({stages_last(zoo)}), "the last stage only, as the classifier uses it"},
      {"style", "pytorch", "the stride on the 3x3 conv (v1.5, torchvision's); caffe puts it on the first 1x1"},
      {"deep_stem", false, "the 7x7 stem (deep_stem is ResNetV1c's)"},
      {"avg_down", false, "a strided 1x1 downsample (avg_down is ResNetV1d's)"},
      {"drop_path_rate", 0.0, "no stochastic depth (its masks are not modelled)"},
      {"conv_cfg", nullptr, "plain convolutions"},
  };
  for (const Default& d : defaults) {
    const json* value = Reader::at(backbone, d.key);
    if (value == nullptr) continue;
    // An int where a one-element tuple is meant (out_indices=3) is the same.
    const bool same = *value == d.value || (d.value.is_array() && d.value.size() == 1 && d.value[0] == *value);
    if (!same) {
      return r.fail(std::string("model.backbone.") + d.key, d.value.dump() + " (" + d.why + ", as the zoo's " +
                                                                zoo.zoo + " is built)",
                    *value);
    }
  }
  if (const json* norm = Reader::at(backbone, "norm_cfg")) {
    const std::string type = last_name(import_name(Reader::at(*norm, "type")).value_or(""));
    if (type != "BN" && type != "SyncBN" && type != "BN2d") {
      return r.fail("model.backbone.norm_cfg.type", "BN or SyncBN (BatchNorm, as the zoo's " + std::string(zoo.zoo) +
                                                        " is built)",
                    norm->value("type", json()));
    }
    if (const json* grad = Reader::at(*norm, "requires_grad"); grad != nullptr && *grad == json(false)) {
      return r.fail("model.backbone.norm_cfg.requires_grad", "true (frozen BatchNorm affine weights are not modelled)",
                    false);
    }
    if (type == "SyncBN") {
      r.note("model.backbone.norm_cfg SyncBN: the statistics' all-reduce (two values a channel) is not priced; "
             "memory as BatchNorm");
    }
  }
  return Status::ok();
}

Result<const ZooBackbone*> read_backbone(Reader& r, const json& model, RunSettings& s) {
  const json* backbone = Reader::at(model, "backbone");
  if (backbone == nullptr || !backbone->is_object()) return r.fail("model.backbone", "a dict with type ResNet");
  const std::string type = last_name(import_name(Reader::at(*backbone, "type")).value_or(""));
  if (type == "ResNetV1c" || type == "ResNetV1d") {
    return r.fail("model.backbone.type",
                  "ResNet: " + type + " has the deep 3x3 stem" +
                      (type == "ResNetV1d" ? std::string(" and average-pooled shortcuts") : std::string()) +
                      ", which is not the zoo's resnet-50 (torchvision's v1.5)",
                  type);
  }
  if (type != "ResNet") {
    return r.fail("model.backbone.type", "ResNet (depth 50: the zoo's resnet-50); other backbones are not in the zoo",
                  backbone->value("type", json()));
  }
  const json* depth = Reader::at(*backbone, "depth");
  const ZooBackbone* zoo = nullptr;
  for (const ZooBackbone& candidate : kBackbones) {
    if (type == candidate.type && depth != nullptr && *depth == json(candidate.depth)) zoo = &candidate;
  }
  if (zoo == nullptr) {
    return r.fail("model.backbone.depth", "50 (the zoo's resnet-50; ResNet-18/34/101/152 are not in the zoo)",
                  backbone->value("depth", json()));
  }
  s.model = zoo->zoo;
  if (Status ok = check_resnet_defaults(r, *backbone, *zoo); !ok.is_ok()) return ok;
  if (Status ok = read_resnet_training(r, *backbone, *zoo, s); !ok.is_ok()) return ok;
  r.rest(*backbone, "model.backbone",
         {"type", "depth", "num_stages", "in_channels", "stem_channels", "base_channels", "expansion", "strides",
          "dilations", "out_indices", "style", "deep_stem", "avg_down", "drop_path_rate", "conv_cfg", "norm_cfg",
          "frozen_stages", "with_cp", "norm_eval", "zero_init_residual", "init_cfg"});
  return zoo;
}

Status read_neck_and_head(Reader& r, const json& model, const ZooBackbone& zoo) {
  const json* neck = Reader::at(model, "neck");
  const std::string neck_type = neck != nullptr ? last_name(import_name(Reader::at(*neck, "type")).value_or("")) : "";
  if (neck_type != "GlobalAveragePooling") {
    return r.fail("model.neck", "GlobalAveragePooling (the zoo's classifier pools the last feature map)",
                  neck != nullptr ? neck->value("type", json()) : json());
  }
  if (const json* dim = Reader::at(*neck, "dim"); dim != nullptr && *dim != json(2)) {
    return r.fail("model.neck.dim", "2", *dim);
  }
  const json* head = Reader::at(model, "head");
  const std::string head_type = head != nullptr ? last_name(import_name(Reader::at(*head, "type")).value_or("")) : "";
  if (head_type != "LinearClsHead") {
    return r.fail("model.head.type", "LinearClsHead (one linear layer, the zoo's fc)",
                  head != nullptr ? head->value("type", json()) : json());
  }
  const json* classes = Reader::at(*head, "num_classes");
  if (classes == nullptr || *classes != json(kZooClasses)) {
    return r.fail("model.head.num_classes",
                  "1000: the zoo's " + std::string(zoo.zoo) +
                      " has the ImageNet-1k head (another head's size is not built; give MODEL as a layer graph)",
                  head->value("num_classes", json()));
  }
  if (const json* channels = Reader::at(*head, "in_channels"); channels != nullptr && *channels != json(zoo.feature_channels)) {
    return r.fail("model.head.in_channels", std::to_string(zoo.feature_channels), *channels);
  }
  if (const json* loss = Reader::at(*head, "loss")) {
    const std::string loss_type = last_name(import_name(Reader::at(*loss, "type")).value_or(""));
    if (loss_type != "CrossEntropyLoss" && loss_type != "LabelSmoothLoss") {
      return r.fail("model.head.loss.type", "CrossEntropyLoss or LabelSmoothLoss", loss->value("type", json()));
    }
  }
  r.rest(*neck, "model.neck", {"type", "dim"});
  r.rest(*head, "model.head", {"type", "num_classes", "in_channels", "loss", "topk", "cal_acc", "init_cfg"});
  return Status::ok();
}

// The model (mmpretrain/models/classifiers/image.py ImageClassifier).
Status read_classifier(Reader& r, const json& cfg, RunSettings& s) {
  const json* model = Reader::at(cfg, "model");
  if (mmengine_model_type(cfg) != "ImageClassifier") {
    return r.fail("model.type", "ImageClassifier", model != nullptr ? model->value("type", json()) : json());
  }
  Result<const ZooBackbone*> zoo = read_backbone(r, *model, s);
  if (!zoo.is_ok()) return zoo.status();
  if (Status ok = read_neck_and_head(r, *model, *zoo.value()); !ok.is_ok()) return ok;
  if (const json* train = Reader::at(*model, "train_cfg"); train != nullptr && Reader::at(*train, "augments") != nullptr) {
    r.note("model.train_cfg.augments: batch augments (Mixup, CutMix) mix the batch on the GPU; their soft labels "
           "(a batch x 1000 tensor) are not priced");
  }
  r.rest(*model, "model", {"type", "backbone", "neck", "head", "train_cfg", "pretrained", "init_cfg"});
  return Status::ok();
}

// The optimizer wrapper: mmpretrain's tools/train.py runs MMEngine's Runner,
// which steps through the wrapper: autocast under AmpOptimWrapper over the fp32
// model (amp_optimizer_wrapper.py optim_context), else fp32.
Status read_precision(Reader& r, const json& cfg, RunSettings& s) {
  Result<OptimWrapperConfig> wrapper = read_optim_wrapper(r, cfg, s);
  if (!wrapper.is_ok()) return wrapper.status();
  if (wrapper->type == "DeepSpeedOptimWrapper") {
    return r.fail("optim_wrapper.type", "OptimWrapper or AmpOptimWrapper (DeepSpeed runs need a FlexibleRunner "
                                        "strategy, which is not read)",
                  wrapper->type);
  }
  const bool amp = wrapper->type == "AmpOptimWrapper" && !wrapper->autocast_fp32;
  s.precision = amp ? (wrapper->bf16 ? Precision::kBf16Amp : Precision::kFp16Amp) : Precision::kFp32;
  if (wrapper->autocast_fp32) r.note("optim_wrapper.dtype float32: autocast to fp32 computes in fp32; priced as fp32");
  s.stack = Stack::kTorchAmp;
  s.optimizer_impl = wrapper->impl;
  s.loss = LossSpec{LossImpl::kFull, 8};
  s.mode = TrainMode::kFull;
  return Status::ok();
}

// The Runner's model wrapper and the checkpoint hook; runner_type and strategy refused.
Status read_runner(Reader& r, const json& cfg, RunSettings& s) {
  if (Status ok = read_model_wrapper(r, cfg, s); !ok.is_ok()) return ok;
  read_checkpoint_hook(r, cfg, s);
  if (const json* runner = Reader::at(cfg, "runner_type"); runner != nullptr && *runner != json("Runner")) {
    return r.fail("runner_type", "Runner (FlexibleRunner's strategies are not read)", *runner);
  }
  if (Reader::at(cfg, "strategy") != nullptr) {
    return r.fail("strategy", "none (FlexibleRunner's DeepSpeed and FSDP strategies are not read)", cfg.at("strategy"));
  }
  return Status::ok();
}

// What MMEngine's Runner can be told by these keys: DDP (model_wrapper_cfg),
// no offload of states or activations; the plan search keeps to it, so that
// the plan can be written back (--emit mmengine). Flags may widen it. A config
// that already wraps in MMFullyShardedDataParallel keeps ZeRO-3 and CPU offload
// open: its cpu_offload key says either.
void keep_search_to_runner(Reader& r, RunSettings& s) {
  const bool fsdp = s.zero_stage == 3;
  s.max_zero_stage = fsdp ? 3 : 0;
  s.allow_cpu_offload = fsdp;
  s.allow_nvme_offload = false;
  s.allow_activation_offload = false;
  r.note(fsdp ? "the plan search keeps to what the config's keys can say: MMFullyShardedDataParallel with "
                "cpu_offload on or off, nothing else offloaded (the offload flags widen it)"
              : "the plan search keeps to what the config's keys can say: DDP without ZeRO, nothing offloaded "
                "(--max-zero and the offload flags widen it)");
}

}  // namespace

Result<ConfigImport> import_mmpretrain_config(const json& dump, std::string_view origin, RunSettings base) {
  ConfigImport out;
  out.settings = std::move(base);
  RunSettings& s = out.settings;
  Reader r(origin, out);
  Result<const json*> config = mmengine_config_of(dump, origin);
  if (!config.is_ok()) return config.status();
  const json& cfg = *config.value();

  if (Status ok = read_classifier(r, cfg, s); !ok.is_ok()) return ok;
  // Batch and image size.
  Result<const json*> loader = read_train_batch(r, cfg, s);
  if (!loader.is_ok()) return loader.status();
  if (Status ok = read_image_size(r, *loader.value(), s); !ok.is_ok()) return ok;
  if (Status ok = read_precision(r, cfg, s); !ok.is_ok()) return ok;
  if (Status ok = read_runner(r, cfg, s); !ok.is_ok()) return ok;
  keep_search_to_runner(r, s);
  if (const json* sync = Reader::at(cfg, "sync_bn"); sync != nullptr) {
    r.note("sync_bn: BatchNorm becomes SyncBatchNorm on several GPUs; its statistics' all-reduce is not priced");
  }
  list_unread_top_level(r, cfg, {"model", "train_dataloader", "optim_wrapper", "model_wrapper_cfg", "default_hooks",
                                 "runner_type", "strategy", "sync_bn"});
  return out;
}

}  // namespace headroom::planner
