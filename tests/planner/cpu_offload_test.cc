// torchao's CPUOffloadOptimizer (--cpu-offload torchao[-offload-gradients]):
// what stays on the GPU and what moves to the host, the rules it keeps, and
// that the planner can choose it. torchao/optim/cpu_offload.py.
#include <doctest/doctest.h>

#include <string>

#include "planner/memory/allocator_rounding.h"
#include "planner/memory/model_states.h"
#include "planner/predict/planner.h"
#include "tests/planner/predict_as_given.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

// Host bytes exact; GPU bytes as the allocator counts each tensor (512 B rounding).
struct Split {
  int64_t large_states = 0;  // parameters of at least 4096 elements, host
  int64_t large_grads = 0;   // host
  int64_t large_grads_gpu = 0;
  int64_t large_params = 0;  // host
  int64_t small_states = 0;  // GPU
  int64_t small_grads = 0;   // GPU
  int64_t largest_grad = 0;  // GPU
};

Split split(const graph::LayerGraph& graph, const RunSettings& s) {
  Split out;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& p : node.params) {
      if (!p.trainable || !p.tied_to.empty()) continue;
      const int64_t states = optimizer_state_bytes(s.optimizer, s.precision, p.shape);
      const int64_t grad = grad_bytes(p, s.precision);
      out.largest_grad = std::max(out.largest_grad, allocated_bytes_for_request(grad));
      if (p.elements() >= 4096) {
        out.large_states += states;
        out.large_grads += grad;
        out.large_grads_gpu += allocated_bytes_for_request(grad);
        out.large_params += param_storage_bytes(p, s.precision);
      } else {
        out.small_states += allocated_bytes_for_request(states);
        out.small_grads += allocated_bytes_for_request(grad);
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("torchao CPU offload: host optimizer per large parameter, GPU gradients kept, no ZeRO buckets") {
  RunSettings s = torchtune_llama_1b();
  s.offload_optimizer = Offload::kCpu;
  s.cpu_offload = CpuOffloadImpl::kTorchao;
  REQUIRE(validate_settings(s, "run").is_ok());
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  GlobalConfig config;
  config.offload_optimizer = Offload::kCpu;
  const ModelStates states = model_states(context->graph, s, config, Accounting::kAllocated);
  const Split expected = split(context->graph, s);
  // Parameters under minimal_size = 4096 elements (the norms) keep a GPU optimizer.
  CHECK(states.optimizer == expected.small_states);
  CHECK(states.grads_full == expected.large_grads_gpu + expected.small_grads);
  CHECK(states.grads_progressive);
  CHECK_FALSE(states.grads_in_backward);
  CHECK(states.comm_buckets == 0);
  // Pinned host copies of each large parameter and its gradient, and its states.
  CHECK(states.host_offload == expected.large_params + expected.large_grads + expected.large_states);

  s.cpu_offload = CpuOffloadImpl::kTorchaoGradients;
  const ModelStates freed = model_states(context->graph, s, config, Accounting::kAllocated);
  CHECK(freed.grads_full == expected.small_grads);
  CHECK(freed.grads_in_backward);
  CHECK(freed.in_backward_bytes == expected.largest_grad);
}

TEST_CASE("torchao CPU offload runs on one GPU without ZeRO, and frees gradients only without accumulation") {
  RunSettings s = torchtune_llama_1b();
  s.offload_optimizer = Offload::kCpu;
  s.cpu_offload = CpuOffloadImpl::kTorchao;
  s.zero_stage = 1;
  Status status = validate_settings(s, "run");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("run: cpu_offload: torchao's CPUOffloadOptimizer is for single-GPU training") == 0);
  s.zero_stage = 0;
  s.cpu_offload = CpuOffloadImpl::kTorchaoGradients;
  s.grad_accum = 2;
  status = validate_settings(s, "run");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("expected grad_accum 1") != std::string::npos);
  // Naming the implementation alone is fine on several GPUs: the planner just
  // does not offer the offload there.
  RunSettings many = torchtune_llama_1b();
  many.gpus_per_node = 2;
  many.cpu_offload = CpuOffloadImpl::kTorchao;
  CHECK(validate_settings(many, "run").is_ok());
}

TEST_CASE("the planner can choose torchao's CPU offload at ZeRO stage 0") {
  // Llama 3 8B in pure bf16 on a 24 GB card: weights 16 GB, and gradients freed
  // as they are copied out leave room that AdamW's 32 GB of states never would.
  RunSettings s;
  s.model = "llama-3-8b";
  s.gpu = "4090";
  s.precision = Precision::kBf16Pure;
  s.seq_len = 512;
  s.cpu_offload = CpuOffloadImpl::kTorchaoGradients;
  const Result<PlanResult> result = plan(s);
  REQUIRE_MESSAGE(result.is_ok(), result.message());
  REQUIRE(result->found);
  CHECK(result->best.config.zero_stage == 0);
  CHECK(result->best.config.offload_optimizer == Offload::kCpu);
}

}  // namespace headroom::planner
