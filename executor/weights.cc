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
  if (file->fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  unsigned char length[8];
  if (::pread(file->fd, length, 8, 0) != 8) return Status::error(path + ": cannot read the header length");
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
    default:
      return Status::error(entry.file + ": " + entry.name + ": dtype " + std::string(graph::dtype_name(entry.dtype)) +
                           " cannot be loaded (expected F32, F16 or BF16; quantized checkpoints need QLoRA, which "
                           "the executor does not implement)");
  }
}

Status read_into(const OpenFile& file, const graph::SafetensorsEntry& entry, torch::Tensor& param) {
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
      return Status::error(entry.file + ": " + entry.name + ": cannot read its data: " +
                           (n < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    done += n;
  }
  param.copy_(host);  // to the module's device and dtype
  return Status::ok();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
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
      return Status::error(file + ": a symbolic link to " + (error ? std::string("a missing file") : target) +
                           " that cannot be followed (an interrupted download?); expected the weights file, or "
                           "no such file to train from random weights");
    }
    return Status::error(file + ": not a regular file (expected the safetensors weights)");
  }
  return found;
}

Result<LoadedWeights> load_safetensors(torch::nn::Module& module, const std::string& path) {
  const std::string directory = directory_of(path);
  const std::string index = directory + "/model.safetensors.index.json";
  const bool sharded = is_file(index);
  LoadedWeights loaded;
  loaded.source = sharded ? index : directory + "/model.safetensors";
  Result<std::vector<graph::SafetensorsEntry>> entries =
      sharded ? graph::read_safetensors_index(index) : graph::read_safetensors_header(loaded.source);
  if (!entries.is_ok()) return entries.status();
  std::map<std::string, const graph::SafetensorsEntry*> by_name;
  for (const graph::SafetensorsEntry& entry : entries.value()) by_name[entry.name] = &entry;

  torch::NoGradGuard no_grad;
  std::map<std::string, std::unique_ptr<OpenFile>> files;
  for (auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    if (name.find("lora_") != std::string::npos) continue;  // adapters start fresh
    const auto found = by_name.find(name);
    if (found == by_name.end()) {
      return Status::error(loaded.source + ": has no tensor \"" + name +
                           "\" (expected every parameter of the model; nothing was trained)");
    }
    const graph::SafetensorsEntry& entry = *found->second;
    if (entry.shape != item.value().sizes().vec()) {
      return Status::error(entry.file + ": " + name + ": shape " + shape_text(entry.shape) + ", expected " +
                           shape_text(item.value().sizes().vec()) + " from the config (nothing was trained)");
    }
    std::unique_ptr<OpenFile>& file = files[entry.file];
    if (!file) {
      Result<std::unique_ptr<OpenFile>> opened = open_data(entry.file);
      if (!opened.is_ok()) return opened.status();
      file = std::move(opened.value());
    }
    if (Status s = read_into(*file, entry, item.value()); !s.is_ok()) return s;
    ++loaded.tensors;
  }
  return loaded;
}

}  // namespace headroom::executor
