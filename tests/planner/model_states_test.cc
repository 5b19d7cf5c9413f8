// Model-state bytes against the ZeRO paper (Rajbhandari et al. 2020, Fig. 1 and
// Sec. 5.1): a 7.5B-parameter model, Adam, mixed precision (K = 12), 64 GPUs needs
// 120 GB per GPU at stage 0, 31.4 GB at stage 1, 16.6 GB at stage 2, 1.9 GB at stage 3.
#include <doctest/doctest.h>

#include <algorithm>

#include <filesystem>
#include <map>
#include <string>
#include <system_error>

#include "planner/memory/allocator_rounding.h"
#include "planner/memory/deepspeed_buckets.h"
#include "planner/memory/model_states.h"
#include "planner/mechanisms/trainability.h"
#include "planner/predict/planner.h"
#include "planner/predict/prediction.h"
#include "planner/settings/validate_settings.h"
#include "planner/time/block_profile.h"
#include "planner/time/step_time.h"
#include "tests/planner/predict_as_given.h"
#include "tests/planner/two_layer_graph.h"

namespace headroom::planner {
namespace {

graph::LayerGraph one_tensor_model(int64_t elements) {
  graph::LayerGraph graph;
  graph.name = "zero-paper-7.5b";
  graph.blocks.push_back({"all", "dense", true});
  graph::Node node;
  node.name = "w";
  node.op = "linear";
  node.params.push_back({"w.weight", {elements}, graph::DType::kBF16, true, ""});
  graph.nodes.push_back(node);
  return graph;
}

int64_t model_state_bytes(int stage) {
  RunSettings settings;
  settings.precision = Precision::kBf16Mixed;
  settings.optimizer = OptimizerKind::kAdamW;
  settings.gpus_per_node = 8;
  settings.nodes = 8;
  GlobalConfig config;
  config.zero_stage = stage;
  const ModelStates states = model_states(one_tensor_model(7'500'000'000), settings, config, Accounting::kAllocated);
  return states.params + states.grads_full + states.optimizer + states.master;
}

}  // namespace

TEST_CASE("ZeRO paper: 7.5B parameters, Adam, mixed precision, 64 GPUs") {
  CHECK(model_state_bytes(0) == 120'000'000'000);
  CHECK(model_state_bytes(1) == doctest::Approx(31.4e9).epsilon(0.002));
  CHECK(model_state_bytes(2) == doctest::Approx(16.6e9).epsilon(0.003));
  CHECK(model_state_bytes(3) == doctest::Approx(1.875e9).epsilon(0.001));
}

TEST_CASE("bytes per parameter by precision and optimizer") {
  CHECK(param_bytes_per_element(Precision::kFp32, true) == 4);
  CHECK(param_bytes_per_element(Precision::kBf16Mixed, true) == 2);
  CHECK(master_bytes_per_element(Precision::kBf16Mixed) == 4);
  CHECK(master_bytes_per_element(Precision::kBf16Pure) == 0);
  CHECK(grad_bytes_per_element(Precision::kFp32) == 4);
  const std::vector<int64_t> matrix = {4096, 4096};
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW, Precision::kBf16Mixed, matrix) == 8 * 4096 * 4096);
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW, Precision::kBf16Pure, matrix) == 4 * 4096 * 4096);
  // bitsandbytes >= 0.44: 1 byte per state plus an fp32 absmax per 256 elements and state.
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW8bit, Precision::kBf16Mixed, matrix) ==
        2 * 4096 * 4096 + 2 * (4096 * 4096 / 256) * 4);
  // ... but 32-bit states below min_8bit_size = 4096 elements.
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW8bit, Precision::kBf16Mixed, {1024}) == 8 * 1024);
  // torchao AdamW4bit: half a byte per state plus an fp32 scale per 128 elements and state,
  // and each state's own 16-value fp32 quantization map (OptimState4bit.zeros) ...
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW4bit, Precision::kBf16Amp, matrix) ==
        2 * (4096 * 4096 / 2 + (4096 * 4096 / 128) * 4 + 16 * 4));
  CHECK(optimizer_state_tensors(OptimizerKind::kAdamW4bit, Precision::kBf16Amp, matrix) ==
        std::vector<int64_t>{4096 * 4096 / 2, 4096 * 4096 / 128 * 4, 64, 4096 * 4096 / 2, 4096 * 4096 / 128 * 4, 64});
  // ... and a plain state in the parameter's dtype under 4096 elements or off the block.
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW4bit, Precision::kBf16Amp, {1024}) == 8 * 1024);
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW4bit, Precision::kBf16Pure, {1024}) == 4 * 1024);
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW4bit, Precision::kBf16Amp, {4100, 3}) == 8 * 4100 * 3);
  CHECK(optimizer_state_bytes(OptimizerKind::kSgdMomentum, Precision::kFp32, matrix) == 4 * 4096 * 4096);
  // torch.optim.SGD without momentum: no state at all (sgd.py _init_group).
  CHECK(optimizer_state_tensors(OptimizerKind::kSgd, Precision::kFp32, matrix).empty());
  // Adafactor factors the second moment of a matrix into a row and a column.
  CHECK(optimizer_state_bytes(OptimizerKind::kAdafactor, Precision::kFp32, {1024, 512}) == (1024 + 512) * 4);
  CHECK(optimizer_state_bytes(OptimizerKind::kAdafactor, Precision::kFp32, {512}) == 512 * 4);
}

TEST_CASE("torchao AdamW8bit: codes, a scale per 256 elements and a 256-value map per state") {
  // torchao 0.17.0 optim/subclass_8bit.py OptimState8bit.zeros: uint8 codes of the
  // parameter's shape, fp32 scale of n / 256, and its own fp32 copy of the 256-value
  // dynamic map; optim/adam.py _new_buffer: a plain zeros_like under 4096 elements or
  // off the block. Not bitsandbytes' layout: no shared maps, no fp32 small states.
  const int64_t n = 4096 * 4096;
  CHECK(optimizer_state_tensors(OptimizerKind::kAdamW8bitTorchao, Precision::kBf16Pure, {4096, 4096}) ==
        std::vector<int64_t>{n, n / 256 * 4, 1024, n, n / 256 * 4, 1024});
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW8bitTorchao, Precision::kBf16Pure, {1024}) == 2 * 2 * 1024);
  CHECK(optimizer_state_bytes(OptimizerKind::kAdamW8bitTorchao, Precision::kFp32, {4096 + 128}) == 2 * 4 * 4224);
}

TEST_CASE("CPU optimizer offload moves states, master weights and gradients to the host") {
  RunSettings settings;
  GlobalConfig config;
  config.zero_stage = 2;
  config.offload_optimizer = Offload::kCpu;
  const ModelStates states = model_states(one_tensor_model(1'000'000'000), settings, config, Accounting::kAllocated);
  CHECK(states.optimizer == 0);
  CHECK(states.master == 0);
  CHECK(states.grads_full == 0);
  CHECK(states.params == 2'000'000'000);
  // ZeRO-Offload: fp32 master (4) + Adam states (8) + fp32 gradients (4) per parameter on the host.
  CHECK(states.host_offload == 16'000'000'000);
  // The reduce bucket stays on the GPU: 5e8 elements of 16-bit gradients, twice
  // under overlap_comm (stage_1_and_2.py setup_buckets: buf_0 and buf_1), in backward only.
  CHECK(deepspeed_backward_bucket_bytes(settings, config, Accounting::kAllocated) == 2'000'000'000);
  CHECK(states.comm_buckets == 0);
  settings.overlap_comm = false;
  CHECK(deepspeed_backward_bucket_bytes(settings, config, Accounting::kAllocated) == 1'000'000'000);
}

TEST_CASE("frozen parameters carry no gradient, optimizer state or master copy") {
  graph::LayerGraph graph = one_tensor_model(1000);
  graph.nodes[0].params[0].trainable = false;
  RunSettings settings;
  const ModelStates states = model_states(graph, settings, GlobalConfig{}, Accounting::kAllocated);
  CHECK(states.trainable_params == 0);
  CHECK(states.grads_full == 0);
  CHECK(states.optimizer == 0);
  CHECK(states.params == 2048);  // 2000 bytes rounded up to the allocator's 512-byte blocks
}

TEST_CASE("AdamW's two states are two allocations, each rounded by the allocator") {
  // 64 bf16 weights under pure bf16: exp_avg and exp_avg_sq of 128 bytes each,
  // 512 allocated each (torch.optim's zeros_like per state), not 512 for both.
  RunSettings settings;
  settings.precision = Precision::kBf16Pure;
  const ModelStates one_gpu = model_states(one_tensor_model(64), settings, GlobalConfig{}, Accounting::kAllocated);
  CHECK(one_gpu.optimizer == 2 * 512);
  // ZeRO's optimizer runs on a flat partition: each state is zeros_like of it,
  // still two allocations.
  settings.gpus_per_node = 2;
  GlobalConfig zero1;
  zero1.zero_stage = 1;
  const ModelStates sharded = model_states(one_tensor_model(64), settings, zero1, Accounting::kAllocated);
  CHECK(sharded.optimizer == 2 * 512);
}

TEST_CASE("DeepSpeed's ZeRO partitions are flat buffers rounded once, not once per parameter") {
  // 40 parameters of 100 bf16 weights on 2 ranks, bf16 mixed: a rank's fp32
  // master partition is 40 x 50 x 4 = 8,000 bytes, each AdamW state as much,
  // and at stage 2 its bf16 gradient partition 4,000: each one buffer
  // (stage_1_and_2.py single_partition_of_fp32_groups, its optimizer's states,
  // the averaged gradient partition), so 8,192 and 4,096 allocated, where
  // rounding each parameter's 200 or 100 bytes to 512 would give 20,480.
  graph::LayerGraph graph = one_tensor_model(100);
  for (int i = 1; i < 40; ++i) {
    graph::Node node = graph.nodes.front();
    node.name = "w" + std::to_string(i);
    node.params.front().name = node.name + ".weight";
    graph.nodes.push_back(node);
  }
  RunSettings settings;
  settings.precision = Precision::kBf16Mixed;
  settings.gpus_per_node = 2;
  GlobalConfig zero2;
  zero2.zero_stage = 2;
  const ModelStates deepspeed = model_states(graph, settings, zero2, Accounting::kAllocated);
  CHECK(deepspeed.master == 8192);
  CHECK(deepspeed.optimizer == 2 * 8192);
  CHECK(deepspeed.grads_full == 4096);
  // FSDP2 shards every parameter as a DTensor of its own: rounded each.
  settings.sharding = Sharding::kFsdp2;
  GlobalConfig zero3;
  zero3.zero_stage = 3;
  const ModelStates fsdp2 = model_states(graph, settings, zero3, Accounting::kAllocated);
  CHECK(fsdp2.optimizer == 2 * 40 * 512);
}

TEST_CASE("a parameter nothing reads gets no gradient and no optimizer state") {
  // LLaVA's vision layers past the feature layer: one "unused" node.
  graph::LayerGraph graph = one_tensor_model(1000);
  graph.nodes[0].op = "unused";
  RunSettings settings;
  const ModelStates states = model_states(graph, settings, GlobalConfig{}, Accounting::kAllocated);
  CHECK(states.trainable_params == 1000);  // trainable, as requires_grad says
  CHECK(states.grads_full == 0);
  CHECK(states.optimizer == 0);
  CHECK(states.params == 2048);
}

TEST_CASE("DeepSpeed ZeRO-3 copies a sub-group's gradient partition to fp32 at the step, FSDP2 stacks do not") {
  RunSettings settings;
  settings.precision = Precision::kBf16Mixed;
  settings.gpus_per_node = 2;
  settings.stack = Stack::kDeepspeed;
  settings.optimizer_impl = OptimizerImpl::kFused;
  GlobalConfig config;
  config.zero_stage = 3;
  const graph::LayerGraph model = one_tensor_model(7'000'000'000);
  // 3.5e9 partition elements per rank, sub-groups of sub_group_size = 1e9: the
  // bf16 flat copy (2 bytes) and its fp32 conversion (4 bytes) of one sub-group.
  CHECK(model_states(model, settings, config, Accounting::kAllocated).step_transient == 6'000'000'000);
  settings.sub_group_elements = 100'000'000;
  CHECK(model_states(model, settings, config, Accounting::kAllocated).step_transient == 600'000'000);
  settings.sub_group_elements = 10'000'000'000;  // larger than the partition
  CHECK(model_states(model, settings, config, Accounting::kAllocated).step_transient == 21'000'000'000);
  settings.stack = Stack::kTorchtitan;  // FSDP2 reduce-scatters into fp32 shards
  CHECK(model_states(model, settings, config, Accounting::kAllocated).step_transient == 0);
  settings.stack = Stack::kDeepspeed;
  config.zero_stage = 2;  // the whole partition at once, whatever sub_group_size (deepspeed_buckets_test.cc)
  settings.sub_group_elements = 100'000'000;
  CHECK(model_states(model, settings, config, Accounting::kAllocated).step_transient == 21'000'000'000);
  config.zero_stage = 3;
  config.offload_optimizer = Offload::kCpu;  // the fp32 copy is on the host
  CHECK(model_states(model, settings, config, Accounting::kAllocated).step_transient == 0);
}



TEST_CASE("FSDP2 stacks: two blocks gathered without a live cap, and the reduce-scatter input per block") {
  // Two blocks of 1e9 trainable bf16 parameters each, 8 GPUs, ZeRO-3.
  graph::LayerGraph graph;
  graph.name = "two-blocks";
  graph.blocks = {{"a", "dense", true}, {"b", "dense", true}};
  for (int b = 0; b < 2; ++b) {
    graph::Node node;
    node.name = "w" + std::to_string(b);
    node.op = "linear";
    node.block = b;
    node.params.push_back({node.name + ".weight", {1'000'000'000}, graph::DType::kBF16, true, ""});
    graph.nodes.push_back(node);
  }
  RunSettings settings;
  settings.precision = Precision::kBf16Mixed;
  settings.gpus_per_node = 8;
  GlobalConfig config;
  config.zero_stage = 3;
  settings.stack = Stack::kDeepspeed;
  const ModelStates deepspeed = model_states(graph, settings, config, Accounting::kAllocated);
  // DeepSpeed: block + prefetch bucket (50M elements), capped at max_live_parameters (1e9 x 2 bytes).
  CHECK(deepspeed.gathered_params == 2'000'000'000);
  CHECK(deepspeed.reduce_scatter_bytes == 0);
  settings.stack = Stack::kTorchtitan;
  const ModelStates fsdp2 = model_states(graph, settings, config, Accounting::kAllocated);
  // this block and the next (or its all-gather output), 2 bytes each, while it runs
  CHECK(*std::max_element(fsdp2.gathered_fwd_block.begin(), fsdp2.gathered_fwd_block.end()) == 4'000'000'000);
  // bf16 unsharded gradients (2) copied into an fp32 reduce-scatter input (4).
  CHECK(fsdp2.reduce_scatter_bytes == 6'000'000'000);
  CHECK(fsdp2.comm_buckets == 0);  // no DeepSpeed reduce bucket
  settings.precision = Precision::kBf16Pure;  // torchtune: reduces in the model's dtype
  CHECK(model_states(graph, settings, config, Accounting::kAllocated).reduce_scatter_bytes == 4'000'000'000);
}

// Llama 3.2 3B (tied embeddings, 128256 x 3072) in pure bf16 at `seq_len` tokens.
static RunSettings llama_32_3b_bf16(int64_t seq_len) {
  RunSettings settings;
  settings.model = std::string(HEADROOM_SOURCE_DIR) + "/bench/accuracy/models/llama-3.2-3b/config.json";
  settings.precision = Precision::kBf16Pure;
  settings.seq_len = seq_len;
  return settings;
}

TEST_CASE("a tied embedding's gradient lives from the head's backward, where autograd first produces it") {
  const RunSettings settings = llama_32_3b_bf16(1024);
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const graph::LayerGraph& graph = context->graph;
  const std::map<std::string, int> shared = shared_gradient_first_block(graph);
  // embed_tokens (block 0) is tied to lm_head (the last block): its gradient is
  // summed from the head's backward on, 128256 x 3072 bf16 elements.
  REQUIRE(shared.size() == 1);
  CHECK(shared.begin()->first.ends_with("embed_tokens.weight"));
  CHECK(shared.begin()->second == static_cast<int>(graph.blocks.size()) - 1);
  const ModelStates states = model_states(graph, settings, user_config(settings), Accounting::kAllocated);
  const int64_t embedding_grad = int64_t{128256} * 3072 * 2;
  CHECK(states.block_grads.back() >= embedding_grad);
  CHECK(states.block_grads.front() < embedding_grad);
  // The simulator agrees: while block 1 runs backward, the embedding's gradient is live.
  const Prediction prediction = predict_as_given(settings);
  CHECK(prediction.simulated_peak_allocated ==
        doctest::Approx(static_cast<double>(prediction.peak_allocated)).epsilon(0.03));
}


// torch/csrc/autograd/input_buffer.cpp: the head's gradient of a bf16 tied weight is
// a transposed view, which can_accumulate_inplace refuses, so the embedding's backward
// holds its own partial gradient and the out-of-place sum, each of the weight's size.
// An fp32 weight under autocast reaches the buffer through the cast's backward, a
// fresh tensor: the embedding's fp32 partial is added in place (on the CPU, profiled:
// aten::add without autocast, aten::add_ under it).
TEST_CASE("a tied embedding's backward holds its partial and, without a cast, the out-of-place sum") {
  const RunSettings settings = llama_32_3b_bf16(1024);
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  auto profile = [&](int64_t grad_width) {
    return profile_step(context->graph, context->analysis, context->compute_dtype, 1, 1024, Accounting::kAllocated,
                        context->gpu, {}, {}, grad_width);
  };
  const StepProfile bf16 = profile(2);
  const StepProfile fp32 = profile(4);
  const int64_t weight = int64_t{128256} * 3072;
  const BlockProfile& embedding = bf16.blocks.front();
  CHECK(embedding.bwd_peak >= embedding.keep + 2 * weight * 2);
  // fp32 (autocast): one fp32 partial where bf16 holds a bf16 partial and the sum.
  CHECK(fp32.blocks.front().bwd_peak - embedding.bwd_peak == weight * 4 - 2 * weight * 2);
  CHECK(fp32.blocks.back().bwd_peak == bf16.blocks.back().bwd_peak);  // the head: the first use in backward
}

// Backward runs a head block's nodes in reverse: the loss first, with the fp32
// log-probabilities, their gradient and the upcast's gradient (12 B a logit), and
// only then lm_head, whose weight gradient is the block's own. The walk prices the
// two stages apart (BlockProfile::bwd_peak_before_param_grads), as the simulator
// and the meta-device oracle see them: Llama-3.2-1B trained in full was 0.49 GiB
// over, the tied weight's gradient counted at the loss.
TEST_CASE("a head block's loss runs backward before lm_head's weight gradient exists") {
  RunSettings settings = llama_32_3b_bf16(2048);
  settings.stack = Stack::kHfTrainer;
  settings.optimizer_impl = OptimizerImpl::kFused;
  settings.micro_batch = 2;
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const StepProfile profile = profile_step(context->graph, context->analysis, context->compute_dtype, 2, 2048,
                                           Accounting::kAllocated, context->gpu, {}, {}, 2);
  const BlockProfile& head = profile.blocks.back();
  REQUIRE(head.bwd_peak_before_param_grads >= 0);
  CHECK(head.bwd_peak_before_param_grads == head.bwd_peak);  // the loss is the block's largest stage
  CHECK(head.bwd_peak_from_param_grads < head.bwd_peak);
  const Prediction prediction = predict_as_given(settings);
  CHECK(prediction.where.block_name == "head");
  const int64_t tied_weight_grad = int64_t{128256} * 3072 * 2;
  CHECK(prediction.peak.gradients < tied_weight_grad);  // not yet made at the loss
  CHECK(prediction.simulated_peak_allocated ==
        doctest::Approx(static_cast<double>(prediction.peak_allocated)).epsilon(0.01));
}

TEST_CASE("NF4 with and without double quantization: 0.5 + 1/64 + 4/16384 vs 0.5 + 4/64 bytes a weight") {
  const graph::LayerGraph graph = one_linear();
  RunSettings settings = qlora_on_one_linear();
  auto frozen_bytes = [&](bool double_quant) {
    settings.nf4_double_quant = double_quant;
    Result<graph::LayerGraph> quantized = apply_training_mode(graph, settings);
    REQUIRE_MESSAGE(quantized.is_ok(), quantized.message());
    int64_t bytes = 0;
    for (const graph::Param& p : quantized->nodes.front().params) {
      if (!p.trainable) bytes += param_storage_bytes(p, settings.precision);
    }
    return bytes;
  };
  const int64_t elements = int64_t{4096} * 4096;
  // bitsandbytes' QuantState on the device: its NF4 code book (16 fp32) and,
  // with double quantization, the dynamic map (256 fp32) and the offset.
  const int64_t code_book = 16 * 4;
  const int64_t nested_constants = 256 * 4 + 4;
  // 4-bit codes, one uint8 absmax per 64 and one fp32 constant per 256 absmax.
  CHECK(frozen_bytes(true) == elements / 2 + elements / 64 + elements / 64 / 256 * 4 + code_book + nested_constants);
  // transformers' default: one fp32 absmax per 64 weights.
  CHECK(frozen_bytes(false) == elements / 2 + elements / 64 * 4 + code_book);
}


TEST_CASE("bitsandbytes paged optimizers: large tensors' states in unified memory, small ones on the device") {
  graph::LayerGraph graph = one_tensor_model(1'000'000);
  graph::Node small = graph.nodes.front();
  small.name = "n";
  small.op = "norm";
  small.params = {{"n.weight", {99'999}, graph::DType::kBF16, true, ""}};
  graph.nodes.push_back(small);
  RunSettings settings;
  settings.precision = Precision::kBf16Pure;
  settings.optimizer = OptimizerKind::kAdamW8bit;
  settings.paged_optimizer = true;
  const ModelStates paged = model_states(graph, settings, GlobalConfig{}, Accounting::kAllocated);
  // 8-bit: the two uint8 states, 2 bytes an element (get_state_buffer pages tensors
  // of at least 1e5 elements; init_state makes their absmax with torch.zeros on the device).
  CHECK(paged.paged_optimizer == 2 * 1'000'000);
  // On the device: the large tensor's two fp32 absmax, the small one's two uint8 state
  // tensors and two fp32 absmax, each an allocation, and the optimizer's two 256-value
  // fp32 quantization maps.
  CHECK(paged.optimizer == 2 * allocated_bytes((1'000'000 + 255) / 256 * 4) + 2 * allocated_bytes(99'999) +
                               2 * allocated_bytes((99'999 + 255) / 256 * 4) + 2 * allocated_bytes(256 * 4));
  // The 32-bit PagedAdamW keeps fp32 states even for bf16 parameters.
  settings.optimizer = OptimizerKind::kAdamW;
  CHECK(model_states(graph, settings, GlobalConfig{}, Accounting::kAllocated).paged_optimizer == 8 * 1'000'000);
  // Not paged: everything in the caching allocator.
  settings.paged_optimizer = false;
  const ModelStates device = model_states(graph, settings, GlobalConfig{}, Accounting::kAllocated);
  CHECK(device.paged_optimizer == 0);
  CHECK(device.optimizer > 0);
}

TEST_CASE("paged states migrate all or nothing: LRU eviction under a cyclic sweep misses on every chunk") {
  CHECK(paged_migrated_bytes(10, 100, 80) == 0);   // 10 bytes in 20 free
  CHECK(paged_migrated_bytes(20, 100, 80) == 0);   // exactly fits
  CHECK(paged_migrated_bytes(21, 100, 80) == 42);  // one byte short: everything, both ways
  CHECK(paged_migrated_bytes(5, 100, 120) == 10);  // the run alone overcommits the GPU
  CHECK(paged_migrated_bytes(0, 100, 120) == 0);
}

TEST_CASE("a paged optimizer leaves the GPU peak, adds to what the host must hold, and is bnb's only") {
  RunSettings s;
  s.model = "llama-3-8b";
  s.gpu = "4090";
  s.precision = Precision::kBf16Pure;
  s.optimizer = OptimizerKind::kAdamW8bit;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.seq_len = 1024;
  const Prediction device = predict_as_given(s);
  s.paged_optimizer = true;
  const Prediction paged = predict_as_given(s);
  CHECK(paged.peak.paged_optimizer_states > 15'000'000'000);  // 2 bytes a parameter, 8.03B
  CHECK(paged.peak_allocated < device.peak_allocated - 14'000'000'000);
  CHECK(paged.host_ram == device.host_ram + paged.peak.paged_optimizer_states);
  // 15 GB of states beside a run that leaves about 4 GiB of the 24 GB free: each
  // step sweeps all of them through the GPU and back over PCIe 4.0.
  const GpuSpec gpu = find_gpu("4090").value();
  REQUIRE(paged.peak.paged_optimizer_states > paged.gpu_capacity - paged.gpu_total);
  CHECK(paged.time.paged_migration_ms ==
        doctest::Approx(transfer_ms(2.0 * static_cast<double>(paged.peak.paged_optimizer_states), gpu.host_link_gbps)));
  CHECK(paged.time.optimizer_ms > paged.time.paged_migration_ms);
  CHECK(device.time.paged_migration_ms == 0);
  // On an 80 GB A100 they stay resident after the first step: nothing moves.
  s.gpu = "a100-80g";
  CHECK(predict_as_given(s).time.paged_migration_ms == 0);
  s.gpu = "4090";
  s.optimizer = OptimizerKind::kSgdMomentum;
  const Status refused = validate_settings(s, "settings");
  CHECK(refused.message().find("paged_optimizer") != std::string::npos);
}


TEST_CASE("what the model is: parameters once, trainable ones, weight bytes by stored dtype") {
  RunSettings s;
  s.model = "gpt2";
  s.gpu = "4090";
  const Prediction gpt2 = predict_as_given(s);
  // GPT-2 small: 124,439,808 parameters, the tied embedding counted once.
  CHECK(gpt2.model.total_params == 124'439'808);
  CHECK(gpt2.model.trainable_params == gpt2.model.total_params);
  CHECK(gpt2.model.weight_bytes_by_dtype == std::map<std::string, int64_t>{{"bf16", 2 * 124'439'808}});

  // QLoRA: the base weights NF4 (half a byte), their constants stored but not
  // counted as parameters, the adapters trainable.
  s.model = "llama-3-8b";
  s.mode = TrainMode::kQlora;
  const Prediction qlora = predict_as_given(s);
  CHECK(qlora.model.total_params > 8'030'000'000);
  CHECK(qlora.model.total_params < 8'080'000'000);  // 8.03 B + 42 M adapters, no absmax
  CHECK(qlora.model.trainable_params == 41'943'040);
  const auto& bytes = qlora.model.weight_bytes_by_dtype;
  REQUIRE(bytes.count("nf4") == 1);
  REQUIRE(bytes.count("u8") == 1);
  CHECK(bytes.at("u8") * 64 == bytes.at("nf4") * 2);  // one 8-bit absmax per 64 weights of half a byte
  int64_t total = 0;
  for (const auto& [dtype, b] : bytes) total += b;
  CHECK(total < 6'000'000'000);
}

TEST_CASE("a plan names its model by an absolute path, so it runs from any directory") {
  RunSettings s;
  s.model = "tests/data/hf/llama-3.2-1b";
  s.gpu = "a100-80g";
  s.calibration_file = "tests/data/calibration_a6000.json";
  std::error_code error;
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(HEADROOM_SOURCE_DIR);
  const Result<FitAnswer> answer = fit(s);
  std::filesystem::current_path(before, error);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  const RunSettings& kept = answer->as_given.settings;
  CHECK(std::filesystem::path(kept.model).is_absolute());
  CHECK(kept.model == std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b");
  CHECK(std::filesystem::path(kept.calibration_file).is_absolute());
  // A zoo name stays a name.
  CHECK(settings_for_plan(RunSettings{}).model == RunSettings{}.model);
}


TEST_CASE("hybrid sharding divides model states by the shard group, not by every GPU") {
  RunSettings settings;
  settings.model = "llama-3-8b";
  settings.precision = Precision::kBf16Mixed;
  settings.gpus_per_node = 8;
  settings.nodes = 4;
  GlobalConfig config;
  config.zero_stage = 3;
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const ModelStates everywhere = model_states(context->graph, settings, config, Accounting::kAllocated);
  settings.shard_gpus = 8;
  const ModelStates per_node = model_states(context->graph, settings, config, Accounting::kAllocated);
  // 32 shards against 8: four times the states, within rounding of each tensor's share.
  CHECK(static_cast<double>(per_node.optimizer) == doctest::Approx(4.0 * everywhere.optimizer).epsilon(0.001));
  CHECK(static_cast<double>(per_node.master) == doctest::Approx(4.0 * everywhere.master).epsilon(0.001));
  CHECK(static_cast<double>(per_node.params) == doctest::Approx(4.0 * everywhere.params).epsilon(0.001));
}

TEST_CASE("hybrid sharding: a reduce-scatter inside the node, then an all-reduce of the shard across nodes") {
  RunSettings settings;
  settings.gpus_per_node = 8;
  settings.nodes = 16;
  settings.network_gbps = 25;
  const GpuSpec gpu = find_gpu("a100-80g").value();
  const double grads = 14e9;  // 7B parameters in bf16
  // Sharded over all 128 GPUs: the reduce-scatter crosses the network.
  CHECK(gradient_collective_ms(settings, gpu, 3, grads) == doctest::Approx(127.0 / 128 * grads / 25e9 * 1e3));
  // Shard groups of one node: NVLink (300 GB/s a direction) for the reduce-scatter, then the
  // 16 replicas all-reduce each rank's 1/8 over the network.
  settings.shard_gpus = 8;
  CHECK(gradient_collective_ms(settings, gpu, 3, grads) ==
        doctest::Approx(7.0 / 8 * grads / 300e9 * 1e3 + 2.0 * 15 / 16 * grads / 8 / 25e9 * 1e3));
  // Stages 0-1 all-reduce over every GPU whatever the groups.
  CHECK(gradient_collective_ms(settings, gpu, 1, grads) == doctest::Approx(2.0 * 127 / 128 * grads / 25e9 * 1e3));
}

TEST_CASE("a shard group must divide the GPUs") {
  RunSettings settings;
  settings.gpus_per_node = 8;
  settings.nodes = 2;
  settings.shard_gpus = 6;
  const Status status = validate_settings(settings, "run.json");
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message().find("run.json: shard_gpus: expected a divisor of the GPU count (16)") == 0);
  settings.shard_gpus = 8;
  CHECK(validate_settings(settings, "run.json").is_ok());
}

}  // namespace headroom::planner
