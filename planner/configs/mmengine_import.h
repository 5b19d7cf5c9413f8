// Any MMEngine config, read by the OpenMMLab project that builds its model:
// `model.type` picks the reader (XTuner's SupervisedFinetune and LLaVAModel:
// planner/configs/xtuner_import.h; mmpretrain's ImageClassifier:
// planner/configs/mmpretrain_import.h). docs/config-import.md ("MMEngine configs").
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "graph/status.h"
#include "planner/configs/config_import.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

enum class MmengineKind {
  kXtuner,      // the LLM is given by MODEL; --deepspeed may come with it
  kMmpretrain,  // the config names a zoo model
};

// Which reader reads `dump` (what read_mmengine_config.py prints), or the error
// naming model.type and the types known.
Result<MmengineKind> mmengine_kind(const nlohmann::json& dump, std::string_view origin);

// The run `dump` says, by the reader of its kind. `with_deepspeed`: launched with
// a DeepSpeed config (XTuner's `xtuner train --deepspeed`); refused for a kind
// whose launcher takes none.
Result<ConfigImport> import_mmengine_config(const nlohmann::json& dump, std::string_view origin, RunSettings base,
                                            bool with_deepspeed);

}  // namespace headroom::planner
