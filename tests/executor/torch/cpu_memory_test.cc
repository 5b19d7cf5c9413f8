// Predicted vs measured on CPU (f32): the bytes each checkpointable block keeps
// for backward in the LibTorch modules, measured through the tracking CPU
// allocator (512-byte rounding, as torch.cuda.memory_allocated and the
// planner's Accounting::kAllocated count), against planner::profile_step for
// the same zoo graph; and the model states (parameters, gradients, AdamW
// states) against planner::model_states.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "executor/cpu_memory.h"
#include "graph/graph_analysis.h"
#include "models/flux.h"
#include "models/llama.h"
#include "models/torch/flux_module.h"
#include "models/torch/llama_module.h"
#include "models/zoo.h"
#include "planner/time/block_profile.h"
#include "planner/settings/hardware.h"
#include "planner/memory/model_states.h"


// c10/util/logging defines CHECK (an abort); the tests mean doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace headroom::executor {
namespace {

namespace tm = models::torch_modules;

constexpr int64_t kRound = 512;

int64_t rounded(int64_t bytes) { return (bytes + kRound - 1) / kRound * kRound; }

// Bytes of the distinct storages of `tensors`, rounded as the tracker counts them.
int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::set<const void*> seen;
  int64_t total = 0;
  for (const torch::Tensor& t : tensors) {
    if (seen.insert(t.storage().data()).second) total += rounded(static_cast<int64_t>(t.storage().nbytes()));
  }
  return total;
}

// The planner's keep bytes per block name, f32, for the zoo model at (batch, seq).
std::map<std::string, int64_t> predicted_keep(const std::string& model, int64_t batch, int64_t seq) {
  const graph::LayerGraph graph = models::build_zoo_model(model, models::ZooOptions{}).value();
  const graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  const planner::StepProfile profile = planner::profile_step(graph, analysis, graph::DType::kF32, batch, seq,
                                                             planner::Accounting::kAllocated,
                                                             planner::find_gpu("a6000").value());
  std::map<std::string, int64_t> out;
  for (size_t b = 0; b < graph.blocks.size(); ++b) out[graph.blocks[b].name] = profile.blocks[b].keep;
  return out;
}

// What one block keeps for backward: bytes still allocated after its forward,
// less its outputs, plus the inputs it saves (allocated before it ran).
int64_t measured_keep(CpuMemoryTracker& tracker, const tm::BlockFn& block, const std::vector<torch::Tensor>& inputs,
                      const std::vector<torch::Tensor>& saved_inputs) {
  const int64_t before = tracker.live_bytes();
  std::vector<torch::Tensor> outputs = block(inputs);
  const int64_t after = tracker.live_bytes();
  const int64_t kept = after - before - storage_bytes(outputs) + storage_bytes(saved_inputs);
  outputs.clear();
  return kept;
}

double relative_error(int64_t predicted, int64_t measured) {
  return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

struct Rounding {
  explicit Rounding(CpuMemoryTracker& t) : tracker(t) { tracker.set_rounding(kRound); }
  ~Rounding() { tracker.set_rounding(1); }
  CpuMemoryTracker& tracker;
};

}  // namespace

TEST_CASE("the tracker counts live and peak bytes of CPU tensors") {
  CpuMemoryTracker& tracker = CpuMemoryTracker::install();
  const int64_t before = tracker.live_bytes();
  tracker.reset_peak();
  {
    const torch::Tensor t = torch::empty({1000}, torch::kFloat);
    CHECK(tracker.live_bytes() - before == 4000);
  }
  CHECK(tracker.live_bytes() == before);
  CHECK(tracker.peak_bytes() - before >= 4000);
}

// Issue 9: oneDNN's bf16 kernels on AMX CPUs allocate scratch memory through
// Allocator::raw_allocate, which asserts that the DataPtr's context is its data
// pointer, and free it through raw_deleter(). Both must work through the
// installed tracker on every CPU, whichever kernels this one happens to take.
TEST_CASE("the tracker serves raw_allocate and raw_deallocate (oneDNN's path)") {
  CpuMemoryTracker& tracker = CpuMemoryTracker::install();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  const int64_t before = tracker.live_bytes();
  void* a = allocator->raw_allocate(1 << 20);
  void* b = allocator->raw_allocate(100);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  std::memset(a, 1, 1 << 20);  // the memory is really there
  CHECK(tracker.live_bytes() - before == (1 << 20) + 100);
  allocator->raw_deallocate(a);
  CHECK(tracker.live_bytes() - before == 100);
  allocator->raw_deallocate(b);
  CHECK(tracker.live_bytes() == before);

  // A DataPtr from allocate() keeps context == data, and frees through it.
  {
    c10::DataPtr p = allocator->allocate(4096);
    CHECK(p.get() == p.get_context());
    CHECK(tracker.live_bytes() - before == 4096);
  }
  CHECK(tracker.live_bytes() == before);
  // Zero bytes: nothing counted, nothing to free.
  { c10::DataPtr empty = allocator->allocate(0); }
  CHECK(tracker.live_bytes() == before);
}

TEST_CASE("bf16 matmul and linear backward through the tracker (the kernels oneDNN picks on this CPU)") {
  CpuMemoryTracker& tracker = CpuMemoryTracker::install();
  const int64_t before = tracker.live_bytes();
  {
    torch::manual_seed(0);
    const torch::Tensor x = torch::randn({64, 256}, torch::kBFloat16).requires_grad_(true);
    const torch::Tensor w = torch::randn({512, 256}, torch::kBFloat16).requires_grad_(true);
    const torch::Tensor y = torch::nn::functional::linear(x, w);
    y.to(torch::kFloat).sum().backward();
    const torch::Tensor reference = torch::matmul(x.detach().to(torch::kFloat), w.detach().to(torch::kFloat).t());
    CHECK(torch::allclose(y.detach().to(torch::kFloat), reference, /*rtol=*/2e-2, /*atol=*/0.5));
    CHECK(w.grad().defined());
  }
  CHECK(tracker.live_bytes() == before);
}

TEST_CASE("tiny-llama decoder layers: predicted vs measured activation bytes") {
  CpuMemoryTracker& tracker = CpuMemoryTracker::install();
  const Rounding rounding(tracker);
  const int64_t batch = 2;
  const int64_t seq = 128;
  const auto predicted = predicted_keep("tiny-llama", batch, seq);
  torch::manual_seed(0);
  tm::LlamaForCausalLM model(models::kTinyLlama);
  const auto [cos, sin] = tm::llama_rope_tables(seq, models::kTinyLlama.hidden / models::kTinyLlama.heads, {});
  for (int64_t i = 0; i < models::kTinyLlama.layers; ++i) {
    const std::string name = "model.layers." + std::to_string(i);
    const torch::Tensor x = torch::randn({batch, seq, models::kTinyLlama.hidden}).requires_grad_();
    tm::DecoderLayer layer = model->layers[static_cast<size_t>(i)];
    const tm::BlockFn fn = [layer](const std::vector<torch::Tensor>& in) mutable {
      return std::vector<torch::Tensor>{layer->forward(in[0], in[1], in[2])};
    };
    const int64_t measured = measured_keep(tracker, fn, {x, cos, sin}, {x});
    const double error = relative_error(predicted.at(name), measured);
    MESSAGE(name << " keeps: predicted " << predicted.at(name) << " B, measured " << measured << " B, error "
                 << error * 100 << "%");
    CHECK(std::abs(error) < 0.05);
  }
}

TEST_CASE("tiny-flux blocks: predicted vs measured activation bytes") {
  CpuMemoryTracker& tracker = CpuMemoryTracker::install();
  const Rounding rounding(tracker);
  const models::FluxConfig& c = models::kTinyFlux;
  const int64_t image_tokens = 64;
  for (const int64_t batch : {1, 2}) {
    const auto predicted = predicted_keep("tiny-flux", batch, image_tokens);
    torch::manual_seed(0);
    tm::FluxTransformer model(c);
    const auto [cos, sin] = tm::flux_rope_tables(c.text_tokens + image_tokens, c.head_dim);
    const torch::Tensor temb = torch::randn({batch, c.hidden}).requires_grad_();
    const auto measure = [&](const std::string& name, auto block, bool saves_streams) {
      const torch::Tensor img = torch::randn({batch, image_tokens, c.hidden}).requires_grad_();
      const torch::Tensor txt = torch::randn({batch, c.text_tokens, c.hidden}).requires_grad_();
      const tm::BlockFn fn = [block](const std::vector<torch::Tensor>& in) mutable { return block->forward(in); };
      std::vector<torch::Tensor> saved_inputs = {temb};
      if (saves_streams) saved_inputs = {img, txt, temb};
      const int64_t measured = measured_keep(tracker, fn, {img, txt, temb, cos, sin}, saved_inputs);
      const double error = relative_error(predicted.at(name), measured);
      MESSAGE("batch " << batch << " " << name << " keeps: predicted " << predicted.at(name) << " B, measured "
                       << measured << " B, error " << error * 100 << "%");
      return error;
    };
    for (size_t i = 0; i < model->transformer_blocks.size(); ++i) {
      const double error = measure("transformer_blocks." + std::to_string(i), model->transformer_blocks[i], true);
      // batch > 1: see docs/executor.md (the linears on the split attention output save copies).
      if (batch == 1) CHECK(std::abs(error) < 0.05);
    }
    for (size_t i = 0; i < model->single_transformer_blocks.size(); ++i) {
      const double error =
          measure("single_transformer_blocks." + std::to_string(i), model->single_transformer_blocks[i], false);
      CHECK(std::abs(error) < 0.05);
    }
  }
}

TEST_CASE("tiny-llama model states (f32, AdamW): predicted vs measured") {
  CpuMemoryTracker& tracker = CpuMemoryTracker::install();
  const Rounding rounding(tracker);
  const graph::LayerGraph graph = models::build_zoo_model("tiny-llama", models::ZooOptions{}).value();
  planner::RunSettings settings;
  settings.model = "tiny-llama";
  settings.precision = planner::Precision::kFp32;
  settings.optimizer = planner::OptimizerKind::kAdamW;
  const planner::ModelStates predicted =
      planner::model_states(graph, settings, planner::GlobalConfig{}, planner::Accounting::kAllocated);

  torch::manual_seed(0);
  const int64_t start = tracker.live_bytes();
  tm::LlamaForCausalLM model(models::kTinyLlama);
  const int64_t params = tracker.live_bytes() - start;
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  const torch::Tensor ids = torch::randint(0, models::kTinyLlama.vocab, {2, 32}, torch::kLong);
  {
    const torch::Tensor loss = model->forward(ids);
    loss.backward();
  }
  const int64_t with_grads = tracker.live_bytes() - start;
  optimizer.step();
  const int64_t with_states = tracker.live_bytes() - start;
  const int64_t grads = with_grads - params;
  const int64_t states = with_states - with_grads;
  MESSAGE("parameters: predicted " << predicted.params << " B, measured " << params << " B");
  MESSAGE("gradients: predicted " << predicted.grads_full << " B, measured " << grads << " B");
  MESSAGE("AdamW states: predicted " << predicted.optimizer << " B, measured " << states << " B");
  CHECK(std::abs(relative_error(predicted.params, params)) < 0.05);
  CHECK(std::abs(relative_error(predicted.grads_full, grads)) < 0.05);
  CHECK(std::abs(relative_error(predicted.optimizer, states)) < 0.05);
}

}  // namespace headroom::executor
