#include "planner/configs/mmengine_import.h"

#include <string>

#include "planner/configs/mmengine_config.h"
#include "planner/configs/mmpretrain_import.h"
#include "planner/configs/xtuner_import.h"

namespace headroom::planner {
namespace {

// model.type -> the project whose reader knows it.
struct KindRow {
  const char* model_type;
  MmengineKind kind;
};
constexpr KindRow kKinds[] = {
    {"SupervisedFinetune", MmengineKind::kXtuner},  // xtuner/model/sft.py
    {"LLaVAModel", MmengineKind::kXtuner},          // xtuner/model/llava.py
    {"ImageClassifier", MmengineKind::kMmpretrain},  // mmpretrain/models/classifiers/image.py
};

}  // namespace

Result<MmengineKind> mmengine_kind(const nlohmann::json& dump, std::string_view origin) {
  Result<const nlohmann::json*> config = mmengine_config_of(dump, origin);
  if (!config.is_ok()) return config.status();
  const std::string type = mmengine_model_type(*config.value());
  std::string known;
  for (const KindRow& row : kKinds) {
    if (type == row.model_type) return row.kind;
    known += (known.empty() ? "" : ", ") + std::string(row.model_type);
  }
  const nlohmann::json* model = MmengineReader::at(*config.value(), "model");
  return config_field_error(origin, "model.type", known + " (XTuner's and mmpretrain's models)",
                            model != nullptr ? model->value("type", nlohmann::json()) : nlohmann::json());
}

Result<ConfigImport> import_mmengine_config(const nlohmann::json& dump, std::string_view origin, RunSettings base,
                                            bool with_deepspeed) {
  Result<MmengineKind> kind = mmengine_kind(dump, origin);
  if (!kind.is_ok()) return kind.status();
  switch (kind.value()) {
    case MmengineKind::kXtuner:
      return import_xtuner_config(dump, origin, std::move(base), with_deepspeed);
    case MmengineKind::kMmpretrain:
      if (with_deepspeed) {
        return Status::invalid_input(std::string(origin) + ": an mmpretrain config runs with tools/train.py, which takes no "
                             "DeepSpeed config; expected it without --deepspeed");
      }
      return import_mmpretrain_config(dump, origin, std::move(base));
  }
  return Status::internal(std::string(origin) + ": unknown MMEngine config kind");
}

}  // namespace headroom::planner
