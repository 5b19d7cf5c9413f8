#include "executor/weights.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "graph/safetensors_header.h"
#include "models/torch/layers.h"

namespace headroom::executor {
namespace {

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string directory_of(const std::string& path) {
  if (path.size() >= 11 && path.compare(path.size() - 11, 11, "config.json") == 0) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
  }
  return path;
}

// An open safetensors file and where its data buffer starts (after the 8-byte
// length and the JSON header).
struct OpenFile {
  int fd = -1;
  int64_t data_start = 0;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

Result<std::unique_ptr<OpenFile>> open_data(const std::string& path) {
  auto file = std::make_unique<OpenFile>();
  file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd < 0) return Status::invalid_input(path + ": cannot open: " + std::strerror(errno));
  unsigned char length[8];
  if (::pread(file->fd, length, 8, 0) != 8)
    return Status::invalid_input(path + ": cannot read the header length");
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | length[i];
  file->data_start = 8 + static_cast<int64_t>(header);  // bounds checked by the header reader already
  return file;
}

Result<torch::ScalarType> scalar_type(const graph::SafetensorsEntry& entry) {
  switch (entry.dtype) {
    case graph::DType::kF32: return torch::kFloat;
    case graph::DType::kF16: return torch::kHalf;
    case graph::DType::kBF16: return torch::kBFloat16;
    case graph::DType::kUInt8: return torch::kUInt8;  // bitsandbytes' packed 4-bit data and 8-bit absmax
    default:
      return Status::unsupported(
          entry.file + ": " + entry.name + ": dtype " +
          std::string(graph::dtype_name(entry.dtype)) +
          " cannot be loaded (expected F32, F16 or BF16, or a bitsandbytes NF4 weight)");
  }
}

// The entry's bytes as a host tensor of its own dtype and shape.
Result<torch::Tensor> read_host(const OpenFile& file, const graph::SafetensorsEntry& entry) {
  Result<torch::ScalarType> type = scalar_type(entry);
  if (!type.is_ok()) return type.status();
  torch::Tensor host = torch::empty(entry.shape, torch::TensorOptions().dtype(type.value()));
  auto* bytes = static_cast<char*>(host.data_ptr());
  const int64_t size = entry.end - entry.begin;
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(file.fd, bytes + done, static_cast<size_t>(size - done),
                              static_cast<off_t>(file.data_start + entry.begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::io(entry.file + ": " + entry.name + ": cannot read its data: " +
                        (n < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    done += n;
  }
  return host;
}

Status read_into(const OpenFile& file, const graph::SafetensorsEntry& entry, torch::Tensor& param) {
  Result<torch::Tensor> host = read_host(file, entry);
  if (!host.is_ok()) return host.status();
  param.copy_(host.value());  // to the module's device and dtype
  return Status::ok();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// A model directory's safetensors entries by name, and its files opened as needed.
struct Checkpoint {
  std::string source;  // model.safetensors or the index
  std::vector<graph::SafetensorsEntry> entries;
  std::map<std::string, const graph::SafetensorsEntry*> by_name;
  std::map<std::string, std::unique_ptr<OpenFile>> files;

  static Result<Checkpoint> open(const std::string& path) {
    const std::string directory = directory_of(path);
    const std::string index = directory + "/model.safetensors.index.json";
    const bool sharded = is_file(index);
    Checkpoint out;
    out.source = sharded ? index : directory + "/model.safetensors";
    Result<std::vector<graph::SafetensorsEntry>> entries =
        sharded ? graph::read_safetensors_index(index) : graph::read_safetensors_header(out.source);
    if (!entries.is_ok()) return entries.status();
    out.entries = std::move(entries.value());
    return out;
  }
  void index_entries() {
    by_name.clear();
    for (const graph::SafetensorsEntry& entry : entries) by_name[entry.name] = &entry;
  }
  Result<OpenFile*> file(const graph::SafetensorsEntry& entry) {
    std::unique_ptr<OpenFile>& file = files[entry.file];
    if (!file) {
      Result<std::unique_ptr<OpenFile>> opened = open_data(entry.file);
      if (!opened.is_ok()) return opened.status();
      file = std::move(opened.value());
    }
    return file.get();
  }
  // The tensor `name` as stored, or an error naming what is missing.
  Result<torch::Tensor> read(const std::string& name) {
    const auto found = by_name.find(name);
    if (found == by_name.end())
      return Status::invalid_input(source + ": has no tensor \"" + name + "\"");
    Result<OpenFile*> opened = file(*found->second);
    if (!opened.is_ok()) return opened.status();
    return read_host(*opened.value(), *found->second);
  }
};

// Copies `stored` into `target` when dtype and shape agree.
Status copy_state(const std::string& origin, const std::string& name, const torch::Tensor& stored,
                  torch::Tensor& target) {
  if (stored.scalar_type() != target.scalar_type() || stored.sizes() != target.sizes()) {
    return Status::invalid_input(
        origin + ": " + name + ": " + std::string(c10::toString(stored.scalar_type())) + " " +
        shape_text(stored.sizes().vec()) + ", expected " +
        std::string(c10::toString(target.scalar_type())) + " " + shape_text(target.sizes().vec()) +
        " as the plan quantizes this weight (nothing was trained)");
  }
  target.copy_(stored);
  return Status::ok();
}

}  // namespace

Result<bool> has_safetensors(const std::string& path) {
  const std::string directory = directory_of(path);
  bool found = false;
  for (const std::string& file : {directory + "/model.safetensors.index.json", directory + "/model.safetensors"}) {
    struct stat link {};
    if (::lstat(file.c_str(), &link) != 0) continue;  // absent: no weights of this kind
    if (is_file(file)) {
      found = true;
      continue;
    }
    if (S_ISLNK(link.st_mode)) {
      std::error_code error;
      const std::string target = std::filesystem::read_symlink(file, error).string();
      return Status::invalid_input(
          file + ": a symbolic link to " + (error ? std::string("a missing file") : target) +
          " that cannot be followed (an interrupted download?); expected the weights file, or "
          "no such file to train from random weights");
    }
    return Status::invalid_input(file + ": not a regular file (expected the safetensors weights)");
  }
  return found;
}

Result<LoadedWeights> load_safetensors(torch::nn::Module& module, const std::string& path) {
  Result<Checkpoint> checkpoint = Checkpoint::open(path);
  if (!checkpoint.is_ok()) return checkpoint.status();
  checkpoint->index_entries();
  LoadedWeights loaded;
  loaded.source = checkpoint->source;
  const auto& by_name = checkpoint->by_name;

  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    if (name.find("lora_") != std::string::npos) continue;  // adapters start fresh
    const auto found = by_name.find(name);
    if (found == by_name.end()) {
      return Status::invalid_input(
          loaded.source + ": has no tensor \"" + name +
          "\" (expected every parameter of the model; nothing was trained)");
    }
    if (by_name.count(name + ".quant_state.bitsandbytes__nf4")) {
      loaded.nf4_weights.push_back(name);  // packed: read into the quantized linear later
      continue;
    }
    if (by_name.count(name + ".quant_state.bitsandbytes__fp4")) {
      return Status::unsupported(
          found->second->file + ": " + name +
          ": stored as bitsandbytes FP4, which the executor does not train (expected NF4)");
    }
    const graph::SafetensorsEntry& entry = *found->second;
    if (entry.shape != item.value().sizes().vec()) {
      return Status::invalid_input(entry.file + ": " + name + ": shape " + shape_text(entry.shape) +
                                   ", expected " + shape_text(item.value().sizes().vec()) +
                                   " from the config (nothing was trained)");
    }
    Result<OpenFile*> file = checkpoint->file(entry);
    if (!file.is_ok()) return file.status();
    if (Status s = read_into(*file.value(), entry, item.value()); !s.is_ok()) return s;
    ++loaded.tensors;
  }
  return loaded;
}

Status load_nf4_states(torch::nn::Module& module, const std::string& path, const std::vector<std::string>& weights) {
  if (weights.empty()) return Status::ok();
  Result<Checkpoint> opened = Checkpoint::open(path);
  if (!opened.is_ok()) return opened.status();
  Checkpoint& checkpoint = opened.value();
  checkpoint.index_entries();
  std::map<std::string, models::torch_modules::LinearImpl*> linears;
  for (const auto& item : module.named_modules()) {
    if (auto* linear = dynamic_cast<models::torch_modules::LinearImpl*>(item.value().get())) {
      linears[item.key() + ".weight"] = linear;
    }
  }
  torch::NoGradGuard no_grad;
  for (const std::string& name : weights) {
    const auto found = linears.find(name);
    if (found == linears.end() || !found->second->nf4) {
      return Status::invalid_input(
          checkpoint.source + ": " + name +
          ": stored as bitsandbytes NF4, but the plan does not quantize this weight (expected "
          "settings.mode qlora with this linear quantized)");
    }
    models::torch_modules::Nf4Weight& nf4 = *found->second->nf4;
    Result<torch::Tensor> state_text = checkpoint.read(name + ".quant_state.bitsandbytes__nf4");
    if (!state_text.is_ok()) return state_text.status();
    const torch::Tensor text = state_text.value().contiguous();
    if (text.scalar_type() != torch::kUInt8) {
      return Status::invalid_input(checkpoint.source + ": " + name +
                                   ".quant_state.bitsandbytes__nf4: expected U8 JSON bytes");
    }
    models::torch_modules::Nf4Weight stored;
    try {
      models::torch_modules::read_nf4_quant_state(
          std::string(reinterpret_cast<const char*>(text.data_ptr<uint8_t>()), static_cast<size_t>(text.numel())),
          checkpoint.source + ": " + name + ".quant_state.bitsandbytes__nf4", stored, torch::kCPU);
    } catch (const std::invalid_argument& e) {
      return Status::invalid_input(e.what());
    }
    if (stored.shape != nf4.shape) {
      return Status::invalid_input(
          checkpoint.source + ": " + name + ": NF4 of shape " + shape_text(stored.shape) +
          ", expected " + shape_text(nf4.shape) + " from the config (nothing was trained)");
    }
    if (stored.offset.defined() != nf4.double_quant()) {
      return Status::invalid_input(
          checkpoint.source + ": " + name + ": " +
          (stored.offset.defined() ? "double-quantized" : "not double-quantized") +
          ", but the plan says nf4_double_quant " + (nf4.double_quant() ? "true" : "false") +
          " (make the plan with the checkpoint's setting; nothing was trained)");
    }
    std::vector<std::pair<std::string, torch::Tensor>> targets = nf4.tensors();
    for (auto& [suffix, target] : targets) {
      const std::string key = suffix.empty() ? name : name + "." + suffix;
      Result<torch::Tensor> value = checkpoint.read(key);
      if (!value.is_ok()) return value.status();
      if (Status s = copy_state(checkpoint.source, key, value.value(), target); !s.is_ok()) return s;
    }
    if (nf4.double_quant()) nf4.offset.copy_(stored.offset);
  }
  return Status::ok();
}

}  // namespace headroom::executor
