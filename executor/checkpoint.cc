#include "executor/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>

#include <cstdint>
#include <vector>

namespace headroom::executor {
namespace {

// The generator states a block's random ops draw from (dropout): the CPU's and,
// when the block runs on a GPU, that device's. The recompute in backward must
// draw the same masks as the forward did (torch.utils.checkpoint's
// preserve_rng_state), or the gradients belong to another network.
//
// The CPU state (about 5 KB, mt19937's) is kept as plain host bytes, not as a
// tensor: on a GPU run it is host memory that torch.cuda.memory_allocated never
// counts, but a tensor would go through the CPU run's tracking allocator and
// count as 5 KiB of activations per checkpointed block (measured on the tiny
// vision models: -6% to -9% of their activations).
struct RngState {
  std::vector<uint8_t> cpu;
  torch::Tensor cuda;
  c10::DeviceIndex device = -1;

  static RngState capture(const std::vector<torch::Tensor>& inputs) {
    RngState state;
    const torch::Tensor cpu_state = at::detail::getDefaultCPUGenerator().get_state();
    const auto* bytes = cpu_state.data_ptr<uint8_t>();
    state.cpu.assign(bytes, bytes + cpu_state.numel());
    for (const torch::Tensor& t : inputs) {
      if (t.defined() && t.is_cuda()) {
        state.device = t.device().index();
        state.cuda = at::cuda::detail::getDefaultCUDAGenerator(state.device).get_state();
        break;
      }
    }
    return state;
  }
  void restore() const {
    at::Generator cpu_generator = at::detail::getDefaultCPUGenerator();
    std::vector<uint8_t> bytes = cpu;  // from_blob needs a mutable buffer; set_state copies from it
    cpu_generator.set_state(torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8));
    if (device >= 0) {
      at::Generator cuda_generator = at::cuda::detail::getDefaultCUDAGenerator(device);
      cuda_generator.set_state(cuda);
    }
  }
};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps the block alive as long as the autograd node: the caller's function
// object is gone by the time backward runs.
// The parameters are kept here, not as saved variables: unpacking a saved leaf
// need not give back the very tensor the recomputed block uses, and
// autograd::grad differentiates by identity.
struct BlockHolder : torch::CustomClassHolder {
  BlockHolder(BlockFunction f, std::vector<torch::Tensor> p, RngState r)
      : block(std::move(f)), parameters(std::move(p)), rng(std::move(r)) {}
  BlockFunction block;
  std::vector<torch::Tensor> parameters;
  RngState rng;  // as the forward found it
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  // `args` = block inputs followed by the trainable parameters.
  // `args` must reach apply() as a TensorList: a std::vector would be taken for a
  // non-tensor argument (the catch-all overload of ExtractVariables wins), and
  // the node would have no differentiable inputs at all.
  static variable_list forward(AutogradContext* ctx, BlockFunction block, int64_t input_count, at::TensorList args) {
    ctx->saved_data["input_count"] = input_count;
    const variable_list inputs(args.begin(), args.begin() + input_count);
    const variable_list parameters(args.begin() + input_count, args.end());
    ctx->saved_data["block"] =
        c10::IValue::make_capsule(c10::make_intrusive<BlockHolder>(block, parameters, RngState::capture(inputs)));
    ctx->save_for_backward(inputs);  // the only activations a checkpointed block keeps
    torch::NoGradGuard no_grad;
    return block(inputs);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const int64_t input_count = ctx->saved_data["input_count"].toInt();
    const auto holder = c10::static_intrusive_pointer_cast<BlockHolder>(ctx->saved_data["block"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    variable_list inputs;
    for (int64_t i = 0; i < input_count; ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(saved[i].requires_grad()));
    }
    variable_list outputs;
    {
      // Replay the forward's random draws, then give the generators back as
      // they were, so the rest of backward (and the next step) is unaffected.
      const RngState now = RngState::capture(inputs);
      holder->rng.restore();
      torch::AutoGradMode enable(true);
      outputs = holder->block(inputs);
      now.restore();
    }
    const size_t arg_count = inputs.size() + holder->parameters.size();
    variable_list wrt;
    std::vector<size_t> position;  // index in (inputs, parameters) of each entry of `wrt`
    for (size_t i = 0; i < arg_count; ++i) {
      const torch::Tensor& t = i < inputs.size() ? inputs[i] : holder->parameters[i - inputs.size()];
      if (t.requires_grad()) {
        wrt.push_back(t);
        position.push_back(i);
      }
    }
    variable_list used_outputs;
    variable_list used_grads;
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (outputs[o].requires_grad() && grad_outputs[o].defined()) {
        used_outputs.push_back(outputs[o]);
        used_grads.push_back(grad_outputs[o]);
      }
    }
    // One gradient per forward argument: the block, the count, then each of args.
    variable_list result(2 + arg_count);
    if (wrt.empty() || used_outputs.empty()) return result;
    const variable_list grads = torch::autograd::grad(used_outputs, wrt, used_grads, /*retain_graph=*/false,
                                                      /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t g = 0; g < grads.size(); ++g) result[2 + position[g]] = grads[g];
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint(const BlockFunction& block, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& parameters) {
  bool differentiable = false;
  for (const torch::Tensor& t : inputs) differentiable = differentiable || t.requires_grad();
  for (const torch::Tensor& t : parameters) differentiable = differentiable || t.requires_grad();
  if (!differentiable || !torch::GradMode::is_enabled()) {
    torch::NoGradGuard no_grad;
    return block(inputs);
  }
  variable_list args = inputs;
  args.insert(args.end(), parameters.begin(), parameters.end());
  return CheckpointFunction::apply(block, static_cast<int64_t>(inputs.size()), at::TensorList(args));
}

models::torch_modules::BlockRunner checkpoint_runner(std::set<std::string> blocks) {
  return [blocks = std::move(blocks)](const std::string& name, torch::nn::Module& module,
                                      const models::torch_modules::BlockFn& fn, const std::vector<torch::Tensor>& inputs) {
    if (!blocks.count(name)) return fn(inputs);
    return checkpoint(fn, inputs, models::torch_modules::trainable_parameters(module));
  };
}

}  // namespace headroom::executor
