#include "planner/memory/fsdp_units.h"

#include <algorithm>

#include "planner/mechanisms/trainability.h"
#include "planner/memory/state_bytes.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

// Bytes of the buffers _reduce_grad (_runtime_utils.py) holds for one unit's
// gradient of `elements` (grad_width bytes each, as autograd produced it): the
// post-backward hook casts it to reduce_dtype when that differs (a full-size
// copy), _get_reduce_scatter_tensors pads it with F.pad (another copy) when the
// unit is not a multiple of the world size, the reduce-scatter writes a new
// shard in reduce_dtype, and _cast_grad_to_param_dtype makes it a shard in the
// parameter's dtype when that differs. With `shard_is_grad` (a unit with no sharded
// gradient yet) that last shard is the unit's new sharded gradient, priced as such
// (ModelStates::sharded_block_grads), not a buffer beside it: _accumulate_sharded_grad
// keeps the very tensor whose data the cast replaced as _saved_grad_shard (torch 2.11
// _runtime_utils.py).
int64_t reduce_scatter_buffers(int64_t elements, int world, int64_t grad_width, int64_t reduce_width,
                               int64_t shard_width, bool shard_is_grad, Accounting accounting) {
  const int64_t shard = flat_param_shard_elements(elements, world);
  int64_t bytes = account(elements * grad_width, accounting);
  if (reduce_width != grad_width) bytes += account(elements * reduce_width, accounting);
  if (shard * world != elements) bytes += account(shard * world * reduce_width, accounting);
  const int64_t output = account(shard * reduce_width, accounting);
  const int64_t cast = shard_width != reduce_width ? account(shard * shard_width, accounting) : 0;
  bytes += output + cast;
  if (shard_is_grad) bytes -= cast > 0 ? cast : output;
  return bytes;
}

// Whether PEFT's adapters are FSDP units of their own: transformers' Trainer
// replaces the FSDP plugin's auto_wrap_policy for a PEFT model
// (transformers/distributed/fsdp.py update_fsdp_plugin_peft) with PEFT's
// fsdp_auto_wrap_policy (peft/utils/other.py), whose lambda_policy_fn wraps every
// leaf module with a weight that requires grad: each lora_A and lora_B Linear.
// The layer's own FlatParameter then holds only frozen weights and gets no gradient.
bool adapters_are_units(const RunSettings& settings) {
  return settings.stack == Stack::kHfTrainer && settings.mode != TrainMode::kFull;
}

}  // namespace

int64_t flat_param_width(Precision precision) {
  return master_bytes_per_element(precision) > 0 ? 4 : param_bytes_per_element(precision, true);
}

std::vector<FlatParamUnit> flat_param_units(const graph::LayerGraph& graph, const RunSettings& settings) {
  const int64_t width = flat_param_width(settings.precision);
  std::vector<FlatParamUnit> per_block(graph.blocks.size());
  FlatParamUnit root;
  root.root = true;
  std::vector<FlatParamUnit> adapters;
  const bool own_adapter_units = adapters_are_units(settings);
  for (const graph::Node& node : graph.nodes) {
    FlatParamUnit& unit = in_fsdp2_root(graph, node.block, settings) ? root : per_block[node.block];
    for (const graph::Param& param : node.params) {
      if (!param.tied_to.empty() || param.buffer) continue;  // FSDP flattens parameters only
      if (own_adapter_units && param.trainable && is_lora_adapter(param)) {
        adapters.push_back({param.elements(), param.elements(), 0, false, node.block});
        continue;
      }
      if (!param.trainable && is_quantization_constant(param)) {
        unit.constant_bytes += param_storage_bytes(param, settings.precision);
        continue;
      }
      const bool packed = !param.trainable && is_quantized_storage(param.dtype);
      const int64_t elements =
          packed ? (param_storage_bytes(param, settings.precision) + width - 1) / width : param.elements();
      unit.elements += elements;
      if (param.trainable) unit.trainable_elements += elements;
    }
  }
  std::vector<FlatParamUnit> units;
  for (size_t b = 0; b < per_block.size(); ++b) {
    if (per_block[b].elements == 0 && per_block[b].constant_bytes == 0) continue;
    units.push_back(per_block[b]);
    units.back().block = static_cast<int>(b);
  }
  units.insert(units.end(), adapters.begin(), adapters.end());
  if (root.elements > 0 || root.constant_bytes > 0) units.push_back(root);
  return units;
}

namespace {

// ZeRO-3: a layer's forward holds its unsharded parameters and, under FSDP2, its
// all-gather output until the next group's all-gather (the copy-in buffer
// AllGatherState keeps, _fsdp_param_group.py); FSDP1 gathers into the flat
// parameter itself and frees it at post-forward, before the next unit's pre-forward.
// A layer's backward holds its own and the previous unit prefetched
// (_backward_prefetch; FSDP1's BACKWARD_PRE, at most two in flight under
// limit_all_gathers). FSDP2 prefetches the group before it in post-forward order
// (comm_ctx.post_forward_order[index - 1]) and nothing for the first group: the
// root's post-forward comes last, so the first layer in a root layout has no group
// to prefetch and its backward holds its own parameters only (torch 2.11
// _fsdp_param_group.py _backward_prefetch, _record_post_forward). The blocks after
// the last layer (final norm, head) see only the last layer: its all-gather output
// in forward (FSDP2), prefetched for backward at the root's pre-backward;
// torchtitan's last layer, kept unsharded, the same bytes.
void in_flight_resharded(const std::vector<int64_t>& layer, bool fsdp2, FsdpInFlight& out) {
  int last = -1;
  for (size_t k = 0; k < layer.size(); ++k) {
    if (layer[k] > 0) last = static_cast<int>(k);
  }
  int64_t previous_group = 0;  // FSDP2: the group before this one in post-forward order
  for (size_t k = 0; k < layer.size(); ++k) {
    if (layer[k] > 0) {
      out.forward[k] = (fsdp2 ? 2 : 1) * layer[k];
      out.backward[k] = layer[k] + (fsdp2 ? previous_group : layer[k]);
      previous_group = layer[k];
    } else if (last >= 0 && static_cast<int>(k) > last) {
      out.forward[k] = fsdp2 ? layer[last] : 0;
      out.backward[k] = layer[last];
    }
  }
}

// ZeRO-2 (fsdp_keeps_unsharded): each layer's unsharded parameters stay from its
// forward to its backward. Block k's forward holds those of the layers before it,
// its own and, under FSDP2, its all-gather output (copied out, then dropped); its
// backward those of every layer up to k, nothing gathered again.
void in_flight_kept(const std::vector<int64_t>& layer, bool fsdp2, FsdpInFlight& out) {
  int64_t kept = 0;
  for (size_t k = 0; k < layer.size(); ++k) {
    kept += layer[k];
    out.forward[k] = kept + (fsdp2 ? layer[k] : 0);
    out.backward[k] = kept;
  }
}

// accelerate's tail unit (fsdp2_kept_tail) stays unsharded from its forward, where
// its all-gather output lives beside it until the root's post-forward, to the end of
// its backward. Its pre-backward hook fires at lm_head's output gradient, after the
// loss's backward, and prefetches the last layer then (_fsdp_state.py
// _pre_backward, _fsdp_param_group.py _backward_prefetch): the loss's backward sees
// only the tail itself (the meta-device oracle's Trainer runs under accelerate 1.15).
void in_flight_kept_tail(const std::vector<int64_t>& layer, int tail, FsdpInFlight& out) {
  int64_t previous = 0;
  for (int k = tail - 1; k >= 0 && previous == 0; --k) previous = layer[static_cast<size_t>(k)];
  const size_t t = static_cast<size_t>(tail);
  out.backward_before[t] = layer[t];
  out.backward[t] = layer[t] + previous;
}

// FSDP1 without backward prefetch (fsdp1_prefetches_backward): each unit is
// unsharded by its own pre-backward hook, so a layer's backward (its recompute
// included) holds only its own, and the blocks after the last layer none. The next
// layer's unshard meets this one's reshard only between the two backwards, where
// little else is live (the meta-device oracle's Trainer: Mistral 7B LoRA on 8 ranks).
void without_backward_prefetch(const std::vector<int64_t>& layer, FsdpInFlight& out) {
  for (size_t k = 0; k < layer.size(); ++k) out.backward[k] = layer[k];
}

}  // namespace

FsdpInFlight fsdp_in_flight(const graph::LayerGraph& graph, const RunSettings& settings, int zero_stage,
                            Accounting accounting) {
  FsdpInFlight out;
  // The whole model one unit (fsdp_wrap model) leaves no layer unit to gather.
  if (!fsdp_shards_params(settings, zero_stage) || settings.fsdp_wrap == FsdpWrap::kModel) return out;
  const std::vector<int64_t> gathered = block_gathered_bytes(graph, settings);
  std::vector<int64_t> layer(gathered.size(), 0);
  for (size_t b = 0; b < gathered.size(); ++b) {
    if (!in_fsdp2_root(graph, static_cast<int>(b), settings)) layer[b] = account(gathered[b], accounting);
  }
  out.forward.assign(layer.size(), 0);
  out.backward.assign(layer.size(), 0);
  const bool fsdp2 = shards_with_fsdp2(settings);
  if (fsdp_keeps_unsharded(settings, zero_stage)) {
    in_flight_kept(layer, fsdp2, out);
  } else {
    in_flight_resharded(layer, fsdp2, out);
  }
  if (!fsdp2 && !fsdp1_prefetches_backward(settings) && !fsdp_keeps_unsharded(settings, zero_stage)) {
    without_backward_prefetch(layer, out);
  }
  out.backward_before = out.backward;
  const int tail = fsdp2_kept_tail(graph, settings);
  if (tail > 0 && !fsdp_keeps_unsharded(settings, zero_stage)) in_flight_kept_tail(layer, tail, out);
  return out;
}

int64_t flat_param_shard_elements(int64_t elements, int world) {
  if (world <= 1) return elements;
  return (elements + world - 1) / world;
}

// One unit's reduce buffers (`buffers`, with its unsharded gradient `unsharded`).
static void add_unit_reduce_buffers(const FlatParamUnit& unit, int64_t buffers, int64_t unsharded, ModelStates& out) {
  if (unit.root) {
    // The root's unsharded gradients are priced per block (fsdp2_root_grads).
    out.fsdp2_root_reduce_scatter = buffers - unsharded;
    return;
  }
  out.reduce_scatter_bytes = std::max(out.reduce_scatter_bytes, buffers);
  int64_t& block = out.reduce_scatter_block[unit.block];  // a layer's adapter units reduce one by one
  block = std::max(block, buffers);
  // A whole layer's unit reduces at its post-backward hook, which fires on the
  // FlatParameter's AccumulateGrad once the split of its views has joined every
  // parameter's gradient (torch 2.11 _flat_param.py _get_unflat_views_unaligned:
  // torch.split; _runtime_utils.py _post_backward_hook), after the block's last node.
  if (!out.fsdp1_post_backward_block.empty()) out.fsdp1_post_backward_block[unit.block] = buffers - unsharded;
}

void apply_flat_params(const graph::LayerGraph& graph, const RunSettings& settings, const GlobalConfig& config,
                       Accounting accounting, ModelStates& out) {
  const int world = settings.shard_group_size();
  const Precision precision = settings.precision;
  const int64_t base_width = flat_param_width(precision);
  const int64_t grad_width = grad_bytes_per_element(precision);
  const int64_t reduce_width = fsdp_reduce_bytes_per_element(settings);
  const std::vector<FlatParamUnit> units = flat_param_units(graph, settings);
  // The plan's offload (the search tries several under one settings), not the user's.
  const bool params_on_gpu = config.offload_param == Offload::kNone;
  const bool offload = fsdp_cpu_offload(settings, config);
  // Accelerate upcasts each trainable FlatParameter of a 16-bit model to fp32 (fsdp_upcasts_trainable).
  const bool upcast = fsdp_upcasts_trainable(settings, config.zero_stage);
  out.params = 0;
  out.grads_full = 0;
  out.reduce_scatter_bytes = 0;
  out.reduce_scatter_block.assign(graph.blocks.size(), 0);
  out.fsdp1_post_backward_block.assign(adapters_are_units(settings) ? 0 : graph.blocks.size(), 0);
  out.fsdp2_root_reduce_scatter = 0;
  // Each unit's sharded gradient is made by its post-backward (model_states.cc, close_fsdp_grads).
  out.sharded_block_grads.assign(offload ? 0 : graph.blocks.size(), 0);
  out.root_sharded_grads = 0;
  if (offload) {
    out.host_shard_bytes = 0;
    out.host_root_shard_bytes = 0;
    out.host_grad_bytes = 0;
    out.offload_grad_shards.assign(graph.blocks.size(), 0);
  }
  for (size_t u = 0; u < units.size(); ++u) {
    const FlatParamUnit& unit = units[u];
    const int64_t shard = flat_param_shard_elements(unit.elements, world);
    const int64_t shard_width = upcast && unit.trainable_elements > 0 ? 4 : base_width;
    out.params += account(unit.constant_bytes, accounting);
    if (params_on_gpu) out.params += account(shard * shard_width, accounting);
    if (offload) out.host_shard_bytes += shard * shard_width;
    if (offload && unit.root) out.host_root_shard_bytes += shard * shard_width;
    if (unit.trainable_elements == 0) continue;
    if (offload) {
      // _accumulate_sharded_grad keeps the shard-dtype gradient as _saved_grad_shard
      // until _post_backward_final_callback has synchronised the copies into _cpu_grad.
      out.host_grad_bytes += shard * shard_width;
      (unit.root ? out.root_offload_grad_shard : out.offload_grad_shards[unit.block]) +=
          account(shard * shard_width, accounting);
    } else {
      const int64_t grad = account(shard * shard_width, accounting);
      out.grads_full += grad;
      (unit.root ? out.root_sharded_grads : out.sharded_block_grads[unit.block]) += grad;
    }
    // The first micro-step's reduce makes the sharded gradient (grad_accum 1: the walk
    // prices it from the unit's backward on); later ones add a cast into it.
    const bool shard_is_grad = !offload && config.grad_accum == 1;
    add_unit_reduce_buffers(unit, reduce_scatter_buffers(unit.elements, world, grad_width, reduce_width, shard_width,
                                                         shard_is_grad, accounting),
                            account(unit.elements * grad_width, accounting), out);
  }
}

}  // namespace headroom::planner
