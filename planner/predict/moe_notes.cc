#include "planner/predict/moe_notes.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "graph/dtype.h"
#include "graph/op_traits.h"
#include "models/moe_loop.h"
#include "planner/mechanisms/trainability.h"
#include "planner/settings/versions.h"

namespace headroom::planner {
namespace {

struct ExpertSummary {
  int64_t layers = 0;
  int64_t experts = 0;  // E, the first dimension of the 3-D weights
  int64_t top_k = 0;    // routed rows per token
  int64_t weight_bytes = 0;      // the 3-D expert weights
  int64_t wrapped_bytes = 0;  // of those, the ones LoRA recomposes (peft_param_wrapper.h)
};

// The grouped GEMMs' weights are [E, out, in]; their input holds tokens * k rows of `in`.
ExpertSummary summarize(const graph::LayerGraph& graph) {
  ExpertSummary out;
  for (const graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kGroupedMm || node.params.empty() || node.inputs.empty()) continue;
    const graph::Param& weight = node.params.front();
    if (weight.shape.size() != 3) continue;
    const bool wrapped = std::any_of(node.params.begin(), node.params.end(), is_lora_adapter);
    if (node.name.ends_with(".gate_up_proj")) ++out.layers;
    out.experts = weight.shape[0];
    const graph::Tensor* input = graph.find_tensor(node.inputs.front());
    if (input != nullptr && weight.shape[2] > 0) out.top_k = input->elements.at(1, 1) / weight.shape[2];
    out.weight_bytes += graph::dtype_bytes(weight.dtype, weight.elements());
    out.wrapped_bytes += wrapped ? graph::dtype_bytes(weight.dtype, weight.elements()) : 0;
  }
  return out;
}

// The loop layouts: Mixtral's (models/moe_loop.h: one "one_hot" mask per sparse
// layer, [tokens, k, E] int64) and DeepSeek-V2's (models/deepseek_moe_loop.cc: one
// "argsort" of the [tokens * k] expert ids per sparse layer); E from the experts'
// down projections (w2 or down_proj) per layer.
ExpertSummary summarize_loop(const graph::LayerGraph& graph) {
  ExpertSummary out;
  int64_t downs = 0;
  int64_t per_token = 0;  // k * E for the one-hot mask, k for the sort
  bool one_hot = false;
  for (const graph::Node& node : graph.nodes) {
    const bool mask = node.op == graph::op::kOneHot && node.name.ends_with(".expert_mask");
    if (mask || (node.op == "argsort" && node.name.ends_with(".sorted_indices"))) {
      ++out.layers;
      one_hot = mask;
      const graph::Tensor* tensor = graph.find_tensor(node.outputs.front());
      if (tensor != nullptr) per_token = tensor->elements.at(1, 1);
    }
    if (!models::is_expert_linear(node.name)) continue;
    if (node.name.ends_with(".w2") || node.name.ends_with(".down_proj")) ++downs;
    for (const graph::Param& param : node.params) {
      if (!is_lora_adapter(param)) out.weight_bytes += graph::dtype_bytes(param.dtype, param.elements());
    }
    const bool wrapped = std::any_of(node.params.begin(), node.params.end(), is_lora_adapter);
    if (wrapped) ++out.wrapped_bytes;  // here: how many expert Linears carry an adapter
  }
  if (out.layers == 0) return out;
  out.experts = downs / out.layers;
  out.top_k = !one_hot ? per_token : (out.experts > 0 ? per_token / out.experts : 0);
  return out;
}

constexpr Release kFusedExperts{5, 0, 0};  // transformers 5.0: experts as 3-D parameters

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

// transformers 5.23.0 runs MoE experts through grouped_mm_experts_forward
// (integrations/moe.py): tokens * k rows sorted by expert, with no capacity
// limit, so what is kept is the same for any routing. bitsandbytes' quantizer
// replaces only `type(module) is nn.Linear` (integrations/bitsandbytes.py,
// replace_with_bnb_linear), and the experts are nn.Parameters of a 3-D shape.
namespace {

// transformers 4.x (MixtralSparseMoeBlock, 4.44.2): each expert keeps what its
// routed rows need, so the saved bytes sum to tokens x k rows however they are
// routed; imbalance moves only the transients of the busiest expert.
std::vector<std::string> loop_notes(const graph::LayerGraph& graph, const RunSettings& settings,
                                    const ExpertSummary& moe) {
  const std::string e = std::to_string(moe.experts);
  const std::string k = std::to_string(moe.top_k);
  std::vector<std::string> out;
  out.push_back(graph.name + " is a mixture of experts (" + std::to_string(moe.layers) + " sparse layers, " + e +
                " experts, top-" + k + ") in transformers 4.x's layout: each expert its own nn.Linear modules, run "
                "by a Python loop over the experts. Routing assumption: each expert's kept tensors are priced at "
                "balanced routing (tokens x " + k + " / " + e + " rows per expert); they sum to tokens x " + k +
                " rows whatever the router does, so the top of the band is the same bytes, and only the busiest "
                "expert's temporaries (one expert's MLP over more rows, up to all tokens with no capacity limit) "
                "grow with imbalance: not priced, the band has no routing term; the time assumes balanced routing");
  if (settings.mode == TrainMode::kQlora) {
    out.push_back("QLoRA on " + graph.name + ": before transformers 5.0 bitsandbytes converts every nn.Linear but "
                  "the output head (integrations/bitsandbytes.py get_keys_to_not_convert, 4.44.2), the experts' and "
                  "the router's among them: the experts are NF4 here (" + gib(moe.weight_bytes) + " with their "
                  "quantization constants)");
  }
  if (moe.wrapped_bytes > 0) {
    out.push_back("LoRA on " + graph.name + "'s experts: " + std::to_string(moe.wrapped_bytes) + " expert Linears "
                  "carry an ordinary LoRA adapter (PEFT's lora.Linear per expert, no ParamWrapper), each keeping its "
                  "input at its routed rows");
  }
  return out;
}

}  // namespace

std::vector<std::string> moe_notes(const graph::LayerGraph& graph, const RunSettings& settings) {
  if (const ExpertSummary loop = summarize_loop(graph); loop.layers > 0) return loop_notes(graph, settings, loop);
  const ExpertSummary moe = summarize(graph);
  if (moe.layers == 0) return {};
  const std::string e = std::to_string(moe.experts);
  const std::string k = std::to_string(moe.top_k);
  std::vector<std::string> out;
  out.push_back(graph.name + " is a mixture of experts (" + std::to_string(moe.layers) + " sparse layers, " + e +
                " experts, top-" + k + "): every expert's weights are resident and trained as given; each token runs " +
                k + " of them. Routing assumption: the memory is that of transformers' grouped_mm experts path, which "
                "keeps tokens x " + k + " routed rows whatever the router does, so balanced routing (tokens x " + k +
                " / " + e + " per expert) and the worst case these models allow (no capacity limit: all tokens on one "
                "expert per layer) cost the same bytes, and the band has no routing term; the time assumes balanced "
                "routing (the FLOPs are those of " + k + " experts per token either way)");
  if (settings.mode == TrainMode::kQlora) {
    out.push_back("QLoRA on " + graph.name + ": bitsandbytes quantizes nn.Linear modules only, and the experts are "
                  "3-D parameters (transformers 5.x fuses them), so their " + gib(moe.weight_bytes) +
                  " stay unquantized, as priced here; only the nn.Linear layers (attention projections, shared experts) "
                  "are NF4");
  }
  if (moe.wrapped_bytes > 0) {
    out.push_back("LoRA on " + graph.name + "'s fused experts (PEFT's lora.ParamWrapper): each forward recomposes "
                  "the targeted expert weights with their adapters, and autograd keeps that copy (" +
                  gib(moe.wrapped_bytes) + " over all layers) until the layer's backward, which also makes its "
                  "gradient at full size; checkpointing recomputes it per layer. Attention-only targets avoid both");
  }
  if (!release_of(settings.versions, "transformers")) {
    out.push_back("The experts are priced as transformers 5.x lays them out (fused 3-D weights). Before 5.0 each "
                  "expert is its own nn.Linear modules, which QLoRA quantizes to NF4 and LoRA can target: give "
                  "--versions transformers=X with a 4.x release to price that layout");
  }
  return out;
}

bool experts_as_modules(const RunSettings& settings) {
  const std::optional<Release> release = release_of(settings.versions, "transformers");
  return release && *release < kFusedExperts;
}

namespace {

// The first transformers release with each family's own model class (the model
// docs' "added to Hugging Face Transformers on" dates: DeepSeek-V3 2025-03-28,
// released in 4.51.0; DeepSeek-V2 2025-07-09, released in 4.54.0). Before it the
// checkpoints load only with trust_remote_code (the hub's modeling_deepseek.py),
// which headroom does not model.
struct FirstRelease {
  const char* family;
  const char* model_class;
  Release release;
};
constexpr FirstRelease kFirstReleases[] = {
    {"deepseek_v2", "DeepseekV2ForCausalLM", {4, 54, 0}},
    {"deepseek_v3", "DeepseekV3ForCausalLM", {4, 51, 0}},
};

std::string release_text(const Release& r) {
  return std::to_string(r.major) + "." + std::to_string(r.minor) + "." + std::to_string(r.patch);
}

}  // namespace

// The builders lay a 4.x run's experts out as modules (mixtral, qwen2_moe,
// qwen3_moe, olmoe: models/moe_loop.h; deepseek_v2/v3: models/deepseek_moe.h); a
// graph that still has grouped experts under a 4.x release is a family whose 4.x
// layout is not built, and a family is refused under a release before its class.
Status refuse_unfused_experts(const graph::LayerGraph& graph, const RunSettings& settings) {
  if (!experts_as_modules(settings)) return Status::ok();
  const Release release = *release_of(settings.versions, "transformers");
  for (const FirstRelease& first : kFirstReleases) {
    if (graph.family != first.family || !(release < first.release)) continue;
    return Status::unsupported(
        settings.model + ": versions: transformers " + release_text(release) + " has no " + first.model_class +
        " (it first appears in transformers " + release_text(first.release) + "); before that the model loads only "
        "with trust_remote_code's modeling_deepseek.py, which headroom does not model; expected transformers=" +
        release_text(first.release) + " or later (docs/models.md)");
  }
  if (summarize(graph).layers == 0) return Status::ok();
  return Status::unsupported(
      settings.model + ": versions: before transformers 5.0 a " + graph.family + " model runs each expert as its own "
      "nn.Linear modules, which bitsandbytes quantizes under QLoRA and PEFT wraps as LoRA; headroom builds that "
      "layout for mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2 and deepseek_v3, not for " + graph.family +
      "; expected transformers=5.0 or later (docs/models.md)");
}

}  // namespace headroom::planner
