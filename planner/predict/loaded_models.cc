#include "planner/predict/loaded_models.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <tuple>

#include "graph/graph_json.h"
#include "models/hf_import.h"
#include "models/torchtune_models.h"

namespace headroom::planner {
namespace {

namespace fs = std::filesystem;

// What a load read, as seen on disk: the path itself and every entry of its
// directory (a config.json's siblings: the safetensors headers the mismatches
// come from). Empty for a zoo name or torchtune component.
struct FileStamp {
  std::string name;
  std::uintmax_t size = 0;
  fs::file_time_type modified;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stamp(const fs::path& path) {
  std::error_code error;
  FileStamp out{path.string(), 0, {}};
  if (fs::is_regular_file(path, error)) out.size = fs::file_size(path, error);
  out.modified = fs::last_write_time(path, error);
  return out;
}

std::vector<FileStamp> fingerprint(const std::string& model) {
  std::error_code error;
  const fs::path path(model);
  const fs::path directory = fs::is_directory(path, error) ? path : path.parent_path();
  std::vector<FileStamp> out{stamp(path)};
  if (directory.empty()) return out;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    out.push_back(stamp(it->path()));
  }
  std::sort(out.begin() + 1, out.end(),
            [](const FileStamp& a, const FileStamp& b) { return a.name < b.name; });
  return out;
}

struct Kept {
  std::string model;
  models::ZooOptions options;
  std::vector<FileStamp> files;
  LoadedModel loaded;
};

// A few graphs at most: one search varies its settings, not its model, though a
// band's two ends may build the model two ways (the repeat_kv and RoPE options).
constexpr size_t kKept = 4;

std::mutex kept_mutex;
std::deque<Kept>& kept_models() {
  static std::deque<Kept> kept;
  return kept;
}

Result<LoadedModel> build(const std::string& model, bool as_path, const models::ZooOptions& options) {
  LoadedModel out;
  if (as_path && models::is_hf_model_path(model)) {
    Result<models::HfModel> hf = models::load_hf_model(model, options);
    if (!hf.is_ok()) return hf.status();
    out.from_hf = true;
    out.graph = std::move(hf->graph);
    out.config_path = std::move(hf->config_path);
    out.quantization = std::move(hf->quantization);
    out.mismatches = std::move(hf->mismatches);
    return out;
  }
  Result<graph::LayerGraph> graph = as_path ? graph::load_graph_file(model)
                                    : models::is_torchtune_component(model) ? models::build_torchtune_model(model, options)
                                                                            : models::build_zoo_model(model, options);
  if (!graph.is_ok()) return graph.status();
  out.graph = std::move(graph.value());
  return out;
}

}  // namespace

Result<LoadedModel> load_model(const std::string& model, bool as_path, const models::ZooOptions& options) {
  const std::vector<FileStamp> files = as_path ? fingerprint(model) : std::vector<FileStamp>{};
  {
    std::lock_guard<std::mutex> lock(kept_mutex);
    for (const Kept& k : kept_models()) {
      if (k.model == model && k.options == options && k.files == files) return k.loaded;
    }
  }
  Result<LoadedModel> built = build(model, as_path, options);
  if (!built.is_ok()) return built;
  std::lock_guard<std::mutex> lock(kept_mutex);
  std::deque<Kept>& kept = kept_models();
  kept.push_front(Kept{model, options, files, built.value()});
  if (kept.size() > kKept) kept.pop_back();
  return built;
}

}  // namespace headroom::planner
