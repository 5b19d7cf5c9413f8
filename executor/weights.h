// Pretrained weights for the executor's modules from a Hugging Face model
// directory's safetensors files (model.safetensors, or the shards a
// model.safetensors.index.json names), through headroom's validating header
// reader (graph/safetensors_header.h: offsets, sizes, dtypes, overlaps): the
// data is read at the offsets the header gives and converted to the module's
// dtype. Only with LibTorch.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "graph/status.h"

namespace headroom::executor {

struct LoadedWeights {
  int tensors = 0;       // parameters filled from the checkpoint
  std::string source;    // the file (or index) they came from
  // Weights the checkpoint stores as bitsandbytes NF4 (a packed uint8 tensor
  // beside "<name>.quant_state.bitsandbytes__nf4"): not read by
  // load_safetensors, but by load_nf4_states once the module is quantized.
  std::vector<std::string> nf4_weights;
};

// Whether `directory` holds safetensors weights to load. A weights file that
// is there but cannot be read (a dangling symbolic link, as an interrupted
// Hugging Face cache download leaves; a directory) is an error naming it, not
// "no weights": training from random weights instead would be a silent change.
Result<bool> has_safetensors(const std::string& directory);

// Fills every parameter of `module` (LoRA adapters excepted: they start fresh)
// from the checkpoint in `directory`. A parameter the checkpoint lacks, a shape
// that differs, or a dtype that is not F32/F16/BF16 is an error naming the file
// and the tensor; nothing is trained on half-loaded weights.
Result<LoadedWeights> load_safetensors(torch::nn::Module& module, const std::string& directory);

// Fills the NF4 storage of each quantized linear in `weights` (models/torch
// nf4.h) from the checkpoint's bitsandbytes state dict: the packed data,
// absmax, code book and, double-quantized, the nested absmax, the dynamic map
// and the offset from the quant_state JSON. The linear must already be
// quantized the same way (shape, double quantization); anything else is an
// error naming the file and the tensor.
Status load_nf4_states(torch::nn::Module& module, const std::string& directory,
                       const std::vector<std::string>& weights);

}  // namespace headroom::executor
