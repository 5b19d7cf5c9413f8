#include "planner/settings/gpu_compute_capability.h"

namespace headroom::planner {
namespace {

struct CapabilityRow {
  std::string_view id;
  ComputeCapability capability;
};

// NVIDIA, "CUDA GPUs - Compute Capability" (developer.nvidia.com/cuda-gpus), and the
// CUDA C++ Programming Guide's compute-capability table: Volta 7.0, Turing 7.5, GA100 8.0,
// GA10x 8.6, Ada 8.9, Hopper 9.0, data-centre Blackwell (B200) 10.0, GeForce and
// workstation Blackwell (RTX 50xx, RTX PRO 6000) 12.0. The A800 is a GA100 and the
// H800 and H20 are GH100 parts (NVIDIA's product pages), so they share 8.0 and 9.0.
constexpr CapabilityRow kRows[] = {
    {"t4", {7, 5}},          {"v100-16g", {7, 0}},     {"v100-32g", {7, 0}},    {"l4", {8, 9}},
    {"a40", {8, 6}},         {"a100-40g", {8, 0}},     {"a100-80g", {8, 0}},    {"a800-80g", {8, 0}},
    {"h100-sxm", {9, 0}},    {"h100-pcie", {9, 0}},    {"h800", {9, 0}},        {"h20", {9, 0}},
    {"h200", {9, 0}},        {"b200", {10, 0}},        {"3090", {8, 6}},        {"4090", {8, 9}},
    {"4070ti-super", {8, 9}}, {"3060", {8, 6}},        {"4060ti-16g", {8, 9}},  {"4080", {8, 9}},
    {"4090d", {8, 9}},       {"5090", {12, 0}},        {"a6000", {8, 6}},       {"l40s", {8, 9}},
    {"rtx6000-ada", {8, 9}}, {"rtx-pro-6000", {12, 0}},
};

}  // namespace

std::optional<ComputeCapability> compute_capability(std::string_view gpu_id) {
  for (const CapabilityRow& row : kRows) {
    if (row.id == gpu_id) return row.capability;
  }
  return std::nullopt;
}

}  // namespace headroom::planner
