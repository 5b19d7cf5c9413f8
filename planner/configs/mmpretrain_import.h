// Reading an mmpretrain image-classification config (the MMEngine Python config
// `python tools/train.py CONFIG` takes) into RunSettings, from what MMEngine's
// own loader prints for it (scripts/exporter/read_mmengine_config.py). The
// model is `ImageClassifier` with a backbone the zoo builds (ResNet depth 50 is
// the zoo's resnet-50); the optimizer wrapper, batch, model wrapper and
// checkpoint hook are MMEngine's (planner/configs/mmengine_config.h); the image size
// comes from the training pipeline. Rules in docs/config-import.md
// ("mmpretrain configs").
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// `dump` is what read_mmengine_config.py prints. The result names its zoo model
// (settings.model); a MODEL argument may still replace it.
Result<ConfigImport> import_mmpretrain_config(const nlohmann::json& dump, std::string_view origin, RunSettings base);

}  // namespace headroom::planner
