// GpuSpec's JSON form: a --gpu-file, and the "gpu_spec" a plan made with one
// carries (docs/hardware.md, "A GPU of your own: --gpu-file"). The fields are
// GpuSpec's, by the same names; reading is strict (unknown keys, wrong types and
// out-of-range figures refused with the file and field named).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "graph/status.h"
#include "planner/settings/hardware.h"

namespace headroom::planner {

// Every field, so that reading it back gives the same GpuSpec.
nlohmann::json gpu_to_json(const GpuSpec& gpu);

// Required: id, name, architecture, memory_bytes, bf16_tflops (0: no bf16),
// fp16_tflops, fp32_tflops, memory_bandwidth_gbps, host_link_gbps. The rest
// default to 0, except cuda_context_bytes and cublas_workspace_bytes, which take
// the catalogue's figures for the architecture. Errors read
// "<origin>: <prefix><field>: expected ..., got ...".
Result<GpuSpec> gpu_from_json(const nlohmann::json& json, std::string_view origin, const std::string& prefix);

// A --gpu-file: at most 1 MiB of JSON (graph::parse_json_text: syntax, nesting
// depth, duplicate keys), one object read by gpu_from_json.
Result<GpuSpec> read_gpu_file(const std::string& path);

}  // namespace headroom::planner
