#include "models/conv2d.h"

namespace headroom::models {

std::string conv2d(GraphBuilder& b, const std::string& name, const std::string& x, int64_t in, int64_t out,
                   int64_t kernel, const SizeExpr& out_elements, bool bias) {
  const SizeExpr flops = out_elements.scaled(2 * in * kernel * kernel);
  OpSpec spec;
  spec.name = name;
  spec.op = "conv2d";
  spec.inputs = {x};
  spec.out_elements = out_elements;
  spec.saves = {SavedRef{x, SaveWhen::kAnyGrad}};
  spec.params = {b.param(name + ".weight", {out, in, kernel, kernel})};
  if (bias) spec.params.push_back(b.param(name + ".bias", {out}));
  spec.fwd_flops = flops;
  spec.bwd_input_flops = flops;
  spec.bwd_param_flops = flops;
  return b.op(spec);
}

}  // namespace headroom::models
