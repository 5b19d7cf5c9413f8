// mmpretrain configs (planner/configs/mmpretrain_import.h) and the dispatch of any
// MMEngine config by its model type (planner/configs/mmengine_import.h), read from what
// MMEngine's loader prints for the configs in tests/data/mmpretrain (written
// from mmpretrain's published configs/resnet/resnet50_8xb32_in1k.py and its
// _base_ files; tests/exporter/mmengine_loader.sh checks that the loader still
// prints these dumps).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <string>

#include "graph/atomic_file.h"
#include "planner/configs/mmengine_import.h"
#include "planner/configs/mmpretrain_import.h"
#include "planner/predict/model_context.h"
#include "planner/configs/xtuner_import.h"
#include "tests/planner/predict_as_given.h"
#include "planner/settings/settings_json.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/";

nlohmann::json dump(const std::string& path) {
  Result<std::string> text = graph::read_file(kData + path + ".dump.json", 1 << 20);
  REQUIRE_MESSAGE(text.is_ok(), text.message());
  return nlohmann::json::parse(text.value());
}

ConfigImport imported(const nlohmann::json& d) {
  RunSettings base;
  base.gpu = "a100-80g";
  Result<ConfigImport> out = import_mmpretrain_config(d, "cfg.py", base);
  REQUIRE_MESSAGE(out.is_ok(), out.message());
  return out.value();
}

std::string refusal(const nlohmann::json& d) {
  Result<ConfigImport> out = import_mmpretrain_config(d, "cfg.py", RunSettings{});
  REQUIRE_FALSE(out.is_ok());
  return out.message();
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

bool any_contains(const std::vector<std::string>& list, const std::string& part) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& s) { return s.find(part) != std::string::npos; });
}

}  // namespace

TEST_CASE("mmpretrain's resnet50_8xb32_in1k is the zoo's resnet-50 at batch 32, 224 px, SGD, fp32") {
  const ConfigImport x = imported(dump("mmpretrain/resnet50_8xb32_in1k"));
  const RunSettings& s = x.settings;
  CHECK(s.model == "resnet-50");
  CHECK(s.micro_batch == 32);
  CHECK(s.resolution == 224);  // RandomResizedCrop scale=224
  CHECK(s.grad_accum == 1);
  CHECK(s.optimizer == OptimizerKind::kSgdMomentum);
  CHECK(s.optimizer_impl == OptimizerImpl::kForeach);
  CHECK(s.precision == Precision::kFp32);  // OptimWrapper (no type: DefaultOptimWrapperConstructor's default)
  CHECK(s.stack == Stack::kTorchAmp);
  CHECK(s.mode == TrainMode::kFull);
  CHECK(s.checkpointing == CheckpointPolicy::kNone);
  CHECK(s.freeze_patterns.empty());
  CHECK(s.zero_stage == 0);
  CHECK(s.max_zero_stage == 0);
  CHECK_FALSE(s.allow_cpu_offload);
  CHECK_FALSE(s.allow_activation_offload);
  // Every key not read is named: dicts apart, variables in one note.
  CHECK(has(x.ignored, "val_dataloader"));
  CHECK(has(x.ignored, "param_scheduler"));
  CHECK(has(x.ignored, "default_hooks.timer"));
  CHECK(has(x.ignored, "default_hooks.checkpoint.interval") == false);  // read: it only times the saves
  CHECK(has(x.ignored, "train_dataloader") == false);
  CHECK(any_contains(x.notes, "max_keep_ckpts: every checkpoint is kept"));
  CHECK(any_contains(x.notes, "RandomResizedCrop scale=224"));
  CHECK(any_contains(x.notes, "default_scope"));  // a top-level variable
}

TEST_CASE("the seed's accumulation config steps every 4 batches with SGD momentum") {
  const ConfigImport x = imported(dump("mmpretrain/resnet50_seed_accumulation"));
  CHECK(x.settings.grad_accum == 4);
  CHECK(x.settings.optimizer == OptimizerKind::kSgdMomentum);
  CHECK(x.settings.micro_batch == 32);
  CHECK(x.settings.precision == Precision::kFp32);

  // The same run written out by hand predicts the same, byte for byte.
  RunSettings by_hand;
  by_hand.model = "resnet-50";
  by_hand.gpu = "a100-80g";
  by_hand.micro_batch = 32;
  by_hand.resolution = 224;
  by_hand.grad_accum = 4;
  by_hand.optimizer = OptimizerKind::kSgdMomentum;
  by_hand.optimizer_impl = OptimizerImpl::kForeach;
  by_hand.precision = Precision::kFp32;
  by_hand.stack = Stack::kTorchAmp;
  by_hand.loss = LossSpec{LossImpl::kFull, 8};
  const Prediction a = predict_as_given(x.settings);
  const Prediction b = predict_as_given(by_hand);
  CHECK(a.gpu_total == b.gpu_total);
  CHECK(a.model.trainable_params == 25'557'032);  // torchvision resnet50
}

TEST_CASE("AmpOptimWrapper bfloat16, with_cp and frozen_stages: bf16 autocast, frozen stem and stage 1, later blocks checkpointed") {
  const ConfigImport x = imported(dump("mmpretrain/resnet50_amp_cp_frozen"));
  const RunSettings& s = x.settings;
  CHECK(s.precision == Precision::kBf16Amp);
  CHECK(s.optimizer == OptimizerKind::kAdamW);
  CHECK(s.micro_batch == 64);
  CHECK(s.resolution == 192);
  CHECK(s.grad_accum == 2);
  CHECK(s.checkpoints_kept == 2);
  CHECK(s.freeze_patterns == std::vector<std::string>{"conv1", "bn1", "layer1.*"});
  // Bottleneck.forward checkpoints only when its input needs a gradient:
  // layer2.0's input comes from the frozen stage 1, so it runs plainly.
  REQUIRE(s.checkpointing == CheckpointPolicy::kList);
  CHECK(s.checkpoint_blocks.size() == 4 + 6 + 3 - 1);
  CHECK(s.checkpoint_blocks.front() == "layer2.1");
  CHECK(s.checkpoint_blocks.back() == "layer4.2");
  CHECK_FALSE(has(s.checkpoint_blocks, "layer2.0"));
  CHECK(any_contains(x.notes, "norm_eval"));

  // Stem and stage 1 frozen: conv1 (9408) + bn1 (128) + layer1 (215808) fewer trainable.
  const Prediction p = predict_as_given(s);
  CHECK(p.model.trainable_params == 25'557'032 - 9'408 - 128 - 215'808);
  // Checkpointing keeps less than the same run without it.
  RunSettings plain = s;
  plain.checkpointing = CheckpointPolicy::kNone;
  plain.checkpoint_blocks.clear();
  CHECK(predict_as_given(plain).gpu_total > p.gpu_total);

  // frozen_stages -1 with with_cp: every block.
  nlohmann::json all = dump("mmpretrain/resnet50_amp_cp_frozen");
  all["config"]["model"]["backbone"]["frozen_stages"] = -1;
  CHECK(imported(all).settings.checkpointing == CheckpointPolicy::kEveryBlock);
  CHECK(imported(all).settings.freeze_patterns.empty());
  // AmpOptimWrapper without dtype autocasts to fp16 (torch.get_autocast_gpu_dtype()).
  nlohmann::json fp16 = all;
  fp16["config"]["optim_wrapper"].erase("dtype");
  CHECK(imported(fp16).settings.precision == Precision::kFp16Amp);
}

TEST_CASE("the seed's MMFullyShardedDataParallel with cpu_offload is FSDP1's CPUOffload over one whole-model unit") {
  const nlohmann::json seed = dump("mmpretrain/resnet50_seed_fsdp_offload");
  const ConfigImport x = imported(seed);
  CHECK(x.settings.zero_stage == 3);
  CHECK(x.settings.sharding == Sharding::kFsdp1);
  CHECK(x.settings.fsdp_wrap == FsdpWrap::kModel);
  CHECK(x.settings.offload_param == Offload::kCpu);
  CHECK(x.settings.offload_optimizer == Offload::kCpu);
  CHECK(x.settings.max_zero_stage == 3);
  CHECK(x.settings.allow_cpu_offload);
  // It is answered: on 2 GPUs the host holds the fp32 shards, their gradients and
  // SGD's momentum, and the GPU the whole gathered model.
  RunSettings two = x.settings;
  two.gpus_per_node = 2;
  REQUIRE_MESSAGE(validate_settings(two, "cfg.py").is_ok(), validate_settings(two, "cfg.py").message());
  const Prediction offloaded = predict_as_given(two);
  RunSettings kept = two;
  kept.offload_param = Offload::kNone;
  kept.offload_optimizer = Offload::kNone;
  const Prediction on_gpu = predict_as_given(kept);
  CHECK(offloaded.host_ram > on_gpu.host_ram);
  CHECK(offloaded.peak_allocated <= on_gpu.peak_allocated);

  nlohmann::json no_offload = seed;
  no_offload["config"]["model_wrapper_cfg"]["cpu_offload"] = false;
  CHECK(imported(no_offload).settings.offload_param == Offload::kNone);
  CHECK(imported(no_offload).settings.zero_stage == 3);
  const auto refused_with = [&](const char* key, nlohmann::json value) {
    nlohmann::json d = seed;
    d["config"]["model_wrapper_cfg"][key] = std::move(value);
    return refusal(d);
  };
  CHECK(refused_with("cpu_offload", {{"offload_params", true}}).find("cfg.py: model_wrapper_cfg.cpu_offload") == 0);
  CHECK(refused_with("auto_wrap_policy", {{"type", "torch.distributed.fsdp.wrap.size_based_auto_wrap_policy"}})
            .find("cfg.py: model_wrapper_cfg.auto_wrap_policy") == 0);
  CHECK(refused_with("sharding_strategy", "SHARD_GRAD_OP").find("cfg.py: model_wrapper_cfg.sharding_strategy") == 0);
  CHECK(refused_with("mixed_precision", {{"param_dtype", "torch.bfloat16"}})
            .find("cfg.py: model_wrapper_cfg.mixed_precision") == 0);
  // MMEngine's FSDP train_step runs backward outside no_sync: every micro-step
  // reduce-scatters, which CPUOffload cannot accumulate.
  nlohmann::json accumulating = seed;
  accumulating["config"]["optim_wrapper"]["accumulative_counts"] = 4;
  CHECK(refusal(accumulating).find("cfg.py: optim_wrapper.accumulative_counts: expected 1 with "
                                   "MMFullyShardedDataParallel(cpu_offload=True)") == 0);
  accumulating["config"]["model_wrapper_cfg"]["cpu_offload"] = false;
  const ConfigImport reduced = imported(accumulating);
  CHECK(reduced.settings.grad_accum == 4);
  CHECK(reduced.settings.fsdp_no_sync == false);

  nlohmann::json ddp = seed;
  ddp["config"]["model_wrapper_cfg"] = {{"type", "MMDistributedDataParallel"}, {"find_unused_parameters", true}};
  const ConfigImport y = imported(ddp);
  CHECK(y.settings.zero_stage == 0);
  CHECK(any_contains(y.notes, "find_unused_parameters"));
}

TEST_CASE("backbones, heads and keys the zoo cannot build are refused by name") {
  const nlohmann::json base = dump("mmpretrain/resnet50_8xb32_in1k");
  const auto with = [&](const char* a, const char* b, nlohmann::json value) {
    nlohmann::json d = base;
    d["config"][a][b] = std::move(value);
    return refusal(d);
  };
  const auto backbone = [&](const char* key, nlohmann::json value) {
    nlohmann::json d = base;
    d["config"]["model"]["backbone"][key] = std::move(value);
    return refusal(d);
  };
  CHECK(backbone("type", "ResNetV1c").find("deep 3x3 stem") != std::string::npos);
  CHECK(backbone("type", "ResNetV1d").find("average-pooled shortcuts") != std::string::npos);
  CHECK(backbone("type", "VisionTransformer").find("model.backbone.type") != std::string::npos);
  CHECK(backbone("depth", 101).find("model.backbone.depth") != std::string::npos);
  CHECK(backbone("style", "caffe").find("model.backbone.style") != std::string::npos);
  CHECK(backbone("deep_stem", true).find("model.backbone.deep_stem") != std::string::npos);
  CHECK(backbone("drop_path_rate", 0.1).find("model.backbone.drop_path_rate") != std::string::npos);
  CHECK(backbone("frozen_stages", 5).find("model.backbone.frozen_stages") != std::string::npos);
  CHECK(backbone("out_indices", nlohmann::json::array({0, 1, 2, 3})).find("out_indices") != std::string::npos);
  CHECK(backbone("norm_cfg", {{"type", "GN"}}).find("norm_cfg.type") != std::string::npos);
  nlohmann::json head = base;
  head["config"]["model"]["head"]["num_classes"] = 10;
  CHECK(refusal(head).find("model.head.num_classes: expected 1000") != std::string::npos);
  CHECK(with("model", "type", "ImageToImageRetriever").find("model.type") != std::string::npos);
  CHECK(with("model", "neck", nullptr).find("model.neck") != std::string::npos);
  // Optimizers: LARS is not modelled; a momentum that is no number is refused.
  nlohmann::json text_momentum = base;
  text_momentum["config"]["optim_wrapper"]["optimizer"]["momentum"] = "0.9";
  CHECK(refusal(text_momentum).find("optim_wrapper.optimizer.momentum") != std::string::npos);
  nlohmann::json lars = base;
  lars["config"]["optim_wrapper"]["optimizer"]["type"] = "LARS";
  CHECK(refusal(lars).find("optim_wrapper.optimizer.type") != std::string::npos);
  nlohmann::json float64 = base;
  float64["config"]["optim_wrapper"]["type"] = "AmpOptimWrapper";
  float64["config"]["optim_wrapper"]["dtype"] = "float64";
  CHECK(refusal(float64).find("optim_wrapper.dtype") != std::string::npos);
  CHECK(with("optim_wrapper", "type", "DeepSpeedOptimWrapper").find("optim_wrapper.type") != std::string::npos);
  nlohmann::json strategy = base;
  strategy["config"]["strategy"] = {{"type", "DeepSpeedStrategy"}};
  CHECK(refusal(strategy).find("cfg.py: strategy") != std::string::npos);
}

TEST_CASE("malformed mmpretrain dumps get one message naming the key") {
  const nlohmann::json base = dump("mmpretrain/resnet50_8xb32_in1k");
  CHECK(refusal(nlohmann::json::array()).find("cfg.py: format") != std::string::npos);
  nlohmann::json no_model = base;
  no_model["config"].erase("model");
  CHECK(refusal(no_model).find("model.type") != std::string::npos);
  nlohmann::json batch = base;
  batch["config"]["train_dataloader"]["batch_size"] = "32";
  CHECK(refusal(batch).find("train_dataloader.batch_size") != std::string::npos);
  nlohmann::json no_pipeline = base;
  no_pipeline["config"]["train_dataloader"]["dataset"].erase("pipeline");
  CHECK(refusal(no_pipeline).find("train_dataloader.dataset.pipeline") != std::string::npos);
  nlohmann::json oblong = base;
  oblong["config"]["train_dataloader"]["dataset"]["pipeline"][1]["scale"] = nlohmann::json::array({224, 160});
  CHECK(refusal(oblong).find("pipeline[1].scale") != std::string::npos);
  nlohmann::json edge_only = base;
  edge_only["config"]["train_dataloader"]["dataset"]["pipeline"][1] = {{"type", "ResizeEdge"}, {"scale", 256}};
  CHECK(refusal(edge_only).find("ResizeEdge") != std::string::npos);
  nlohmann::json accum = base;
  accum["config"]["optim_wrapper"]["accumulative_counts"] = 0;
  CHECK(refusal(accum).find("optim_wrapper.accumulative_counts") != std::string::npos);
  nlohmann::json wrapped = base;  // a RepeatDataset holds the dataset with the pipeline
  wrapped["config"]["train_dataloader"]["dataset"] = {{"type", "RepeatDataset"}, {"times", 2},
                                                      {"dataset", base["config"]["train_dataloader"]["dataset"]}};
  CHECK(imported(wrapped).settings.resolution == 224);
}

TEST_CASE("an MMEngine config is read by the reader of its model type") {
  const nlohmann::json resnet = dump("mmpretrain/resnet50_8xb32_in1k");
  const nlohmann::json sft = dump("xtuner/llama3_8b_instruct_qlora_alpaca_e3");
  REQUIRE(mmengine_kind(resnet, "a.py").is_ok());
  CHECK(mmengine_kind(resnet, "a.py").value() == MmengineKind::kMmpretrain);
  CHECK(mmengine_kind(sft, "b.py").value() == MmengineKind::kXtuner);
  Result<ConfigImport> via = import_mmengine_config(sft, "b.py", RunSettings{}, false);
  Result<ConfigImport> direct = import_xtuner_config(sft, "b.py", RunSettings{}, false);
  REQUIRE(via.is_ok());
  REQUIRE(direct.is_ok());
  CHECK(settings_to_json(via->settings) == settings_to_json(direct->settings));
  nlohmann::json other = resnet;
  other["config"]["model"]["type"] = "EncoderDecoder";
  Result<MmengineKind> unknown = mmengine_kind(other, "c.py");
  REQUIRE_FALSE(unknown.is_ok());
  CHECK(unknown.message().find("c.py: model.type: expected SupervisedFinetune, LLaVAModel, ImageClassifier") !=
        std::string::npos);
  Result<ConfigImport> with_ds = import_mmengine_config(resnet, "a.py", RunSettings{}, true);
  REQUIRE_FALSE(with_ds.is_ok());
  CHECK(with_ds.message().find("without --deepspeed") != std::string::npos);
}

}  // namespace headroom::planner
