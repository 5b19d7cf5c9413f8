#include "graph/validate.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace headroom::graph {
namespace {

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

// "nodes[3] (\"layers.0.mlp\")": index and name, so a message finds the entry
// both in a file and in a builder's source.
std::string label(std::string_view array, size_t index, std::string_view name) {
  std::string out = std::string(array) + "[" + std::to_string(index) + "]";
  if (!name.empty()) out += " (" + in_quotes(name) + ")";
  return out;
}

class Validator {
 public:
  Validator(const LayerGraph& graph, std::string_view origin) : graph_(graph), origin_(origin) {}

  Status run();

 private:
  Status fail(const std::string& path, const std::string& problem) const {
    return Status::invalid_input(std::string(origin_) + ": " + path + ": " + problem);
  }

  Status check_header() const;
  Status check_sequence() const;
  Status check_blocks() const;
  Status check_tensors();
  Status check_size(const std::string& path, const SizeExpr& expr) const;
  Status check_nodes();
  Status check_node_tensors(size_t index, const std::string& path);
  Status check_params();
  Status check_tied_params() const;
  Status check_block_order() const;
  Status check_acyclic() const;

  const LayerGraph& graph_;
  std::string_view origin_;
  std::unordered_map<std::string, int> tensor_index_;
  std::vector<int> producer_;  // per tensor: node index or -1 (graph input)
  struct ParamRef {
    const Param* param;
    std::string path;
  };
  std::vector<ParamRef> params_;  // in node order, so messages are deterministic
  std::unordered_map<std::string, size_t> param_index_;
};

Status Validator::run() {
  // Each check relies on the ones before it (sizes need a sane max_seq, nodes
  // need the tensor index), so they run in order and stop at the first failure.
  if (Status s = check_header(); !s.is_ok()) return s;
  if (Status s = check_sequence(); !s.is_ok()) return s;
  if (Status s = check_blocks(); !s.is_ok()) return s;
  if (Status s = check_tensors(); !s.is_ok()) return s;
  if (Status s = check_nodes(); !s.is_ok()) return s;
  if (Status s = check_params(); !s.is_ok()) return s;
  if (Status s = check_tied_params(); !s.is_ok()) return s;
  // A cycle is the more basic fault; a cycle through two blocks would otherwise
  // be reported as a block-order violation.
  if (Status s = check_acyclic(); !s.is_ok()) return s;
  return check_block_order();
}

Status Validator::check_header() const {
  if (graph_.version != kLayerGraphFormatVersion) {
    return fail("version", "unsupported version " + std::to_string(graph_.version) + " (expected " +
                               std::to_string(kLayerGraphFormatVersion) + ")");
  }
  if (graph_.name.empty()) return fail("name", "empty (expected the model's name)");
  return Status::ok();
}

Status Validator::check_sequence() const {
  const SequenceSpec& seq = graph_.sequence;
  if (seq.unit != "tokens" && seq.unit != "image") {
    return fail("sequence.unit",
                "unknown unit " + in_quotes(seq.unit) + " (expected \"tokens\" or \"image\")");
  }
  if (seq.max_seq < 1) {
    return fail("sequence.max_seq", std::to_string(seq.max_seq) + " (expected at least 1)");
  }
  if (seq.default_seq < 1 || seq.default_seq > seq.max_seq) {
    return fail("sequence.default_seq",
                std::to_string(seq.default_seq) +
                    " (expected 1 to max_seq = " + std::to_string(seq.max_seq) + ")");
  }
  if (seq.extra_tokens < 0) {
    return fail("sequence.extra_tokens",
                std::to_string(seq.extra_tokens) + " (expected 0 or more)");
  }
  if (seq.unit != "image") return Status::ok();
  if (seq.patch_px <= 0) {
    return fail("sequence.patch_px", std::to_string(seq.patch_px) +
                                         " (expected a positive patch size in pixels for "
                                         "unit \"image\")");
  }
  if (seq.images < 1) {
    return fail("sequence.images", std::to_string(seq.images) + " (expected at least 1)");
  }
  if (seq.default_resolution <= 0) {
    return fail("sequence.default_resolution",
                std::to_string(seq.default_resolution) +
                    " (expected a positive resolution in pixels for unit \"image\")");
  }
  return Status::ok();
}

Status Validator::check_blocks() const {
  if (graph_.blocks.empty()) return fail("blocks", "empty (expected at least one block)");
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < graph_.blocks.size(); ++i) {
    const Block& block = graph_.blocks[i];
    const std::string path = label("blocks", i, block.name);
    if (block.name.empty()) return fail(path + ".name", "empty (expected a block name)");
    auto [it, inserted] = seen.emplace(block.name, i);
    if (!inserted) {
      return fail(path + ".name", "duplicate block name " + in_quotes(block.name) +
                                      " (first used by blocks[" + std::to_string(it->second) +
                                      "])");
    }
  }
  return Status::ok();
}

// Sizes must hold at the largest batch and sequence the planner may try, so that
// SizeExpr::at() never overflows after validation.
Status Validator::check_size(const std::string& path, const SizeExpr& expr) const {
  if (expr.any_negative()) {
    return fail(path,
                "negative coefficient in " + expr.to_string() + " (expected non-negative counts)");
  }
  if (!expr.eval(kValidateMaxBatch, graph_.sequence.max_seq).has_value()) {
    return fail(path, expr.to_string() +
                          " overflows int64 at B = " + std::to_string(kValidateMaxBatch) +
                          ", S = " + std::to_string(graph_.sequence.max_seq) +
                          " (expected a count that fits in 64 bits)");
  }
  return Status::ok();
}

Status Validator::check_tensors() {
  for (size_t i = 0; i < graph_.tensors.size(); ++i) {
    const Tensor& tensor = graph_.tensors[i];
    const std::string path = label("tensors", i, tensor.name);
    if (tensor.name.empty()) return fail(path + ".name", "empty (expected a tensor name)");
    auto [it, inserted] = tensor_index_.emplace(tensor.name, static_cast<int>(i));
    if (!inserted) {
      return fail(path + ".name", "duplicate tensor name " + in_quotes(tensor.name) +
                                      " (first used by tensors[" + std::to_string(it->second) +
                                      "])");
    }
    if (Status s = check_size(path + ".elements", tensor.elements); !s.is_ok()) return s;
    // Bytes at the widest width the tensor may take: its own dtype, or f32 when
    // the run's compute dtype decides (fp32 training).
    const int64_t elements = *tensor.elements.eval(kValidateMaxBatch, graph_.sequence.max_seq);
    const int64_t bits = dtype_bits(tensor.dtype.value_or(DType::kF32));
    int64_t total_bits = 0;
    if (__builtin_mul_overflow(elements, bits, &total_bits)) {
      return fail(path + ".elements",
                  "byte size overflows int64 at B = " + std::to_string(kValidateMaxBatch) +
                      ", S = " + std::to_string(graph_.sequence.max_seq) +
                      " (expected a size that fits in 64 bits)");
    }
  }
  producer_.assign(graph_.tensors.size(), -1);
  return Status::ok();
}

Status Validator::check_nodes() {
  if (graph_.nodes.empty()) return fail("nodes", "empty (expected at least one node)");
  std::unordered_map<std::string, size_t> seen;
  const int block_count = static_cast<int>(graph_.blocks.size());
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const Node& node = graph_.nodes[i];
    const std::string path = label("nodes", i, node.name);
    if (node.name.empty()) return fail(path + ".name", "empty (expected a node name)");
    auto [it, inserted] = seen.emplace(node.name, i);
    if (!inserted) {
      return fail(path + ".name", "duplicate node name " + in_quotes(node.name) +
                                      " (first used by nodes[" + std::to_string(it->second) + "])");
    }
    if (node.op.empty()) {
      return fail(path + ".op", "empty (expected an op such as \"linear\" or \"norm\")");
    }
    if (node.block < 0 || node.block >= block_count) {
      return fail(path + ".block", std::to_string(node.block) + " out of range (expected 0 to " +
                                       std::to_string(block_count - 1) + ")");
    }
    if (Status s = check_node_tensors(i, path); !s.is_ok()) return s;
    const std::pair<const char*, const SizeExpr*> sizes[] = {
        {".fwd_flops", &node.fwd_flops},
        {".bwd_input_flops", &node.bwd_input_flops},
        {".bwd_param_flops", &node.bwd_param_flops},
        {".fwd_io_elements", &node.fwd_io_elements},
        {".fwd_io_f32_elements", &node.fwd_io_f32_elements},
        {".workspace_elements", &node.workspace_elements},
    };
    for (const auto& [field, expr] : sizes) {
      if (Status s = check_size(path + field, *expr); !s.is_ok()) return s;
    }
    if (node.bwd_workspace_elements) {
      if (Status s = check_size(path + ".bwd_workspace_elements", *node.bwd_workspace_elements); !s.is_ok()) return s;
    }
    if (node.linear) {
      if (node.linear->in_features <= 0 || node.linear->out_features <= 0) {
        return fail(path + ".linear",
                    "in_features = " + std::to_string(node.linear->in_features) +
                        ", out_features = " + std::to_string(node.linear->out_features) +
                        " (expected both positive)");
      }
      if (Status s = check_size(path + ".linear.rows", node.linear->rows); !s.is_ok()) return s;
    }
  }
  return Status::ok();
}

Status Validator::check_node_tensors(size_t index, const std::string& path) {
  const Node& node = graph_.nodes[index];
  auto unknown = [&](const std::string& field, const std::string& name) {
    return fail(path + field, "unknown tensor " + in_quotes(name) +
                                  " (expected the name of a tensor in \"tensors\")");
  };
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    if (!tensor_index_.contains(node.inputs[k])) {
      return unknown(".inputs[" + std::to_string(k) + "]", node.inputs[k]);
    }
  }
  for (size_t k = 0; k < node.holds.size(); ++k) {
    if (!tensor_index_.contains(node.holds[k])) return unknown(".holds[" + std::to_string(k) + "]", node.holds[k]);
  }
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const std::string field = ".outputs[" + std::to_string(k) + "]";
    auto it = tensor_index_.find(node.outputs[k]);
    if (it == tensor_index_.end()) return unknown(field, node.outputs[k]);
    int& producer = producer_[static_cast<size_t>(it->second)];
    if (producer != -1) {
      const Node& other = graph_.nodes[static_cast<size_t>(producer)];
      return fail(path + field, "tensor " + in_quotes(node.outputs[k]) +
                                    " is already produced by " +
                                    label("nodes", static_cast<size_t>(producer), other.name) +
                                    " (expected each tensor to be written by one node)");
    }
    producer = static_cast<int>(index);
  }
  for (size_t k = 0; k < node.saves.size(); ++k) {
    const std::string& name = node.saves[k].tensor;
    const std::string field = ".saves[" + std::to_string(k) + "].tensor";
    if (!tensor_index_.contains(name)) return unknown(field, name);
    const bool own =
        std::find(node.inputs.begin(), node.inputs.end(), name) != node.inputs.end() ||
        std::find(node.outputs.begin(), node.outputs.end(), name) != node.outputs.end();
    if (!own) {
      return fail(path + field, "tensor " + in_quotes(name) +
                                    " is neither an input nor an output of this node "
                                    "(expected a node to save only tensors it reads or writes)");
    }
  }
  return Status::ok();
}

Status Validator::check_params() {
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const Node& node = graph_.nodes[i];
    for (size_t k = 0; k < node.params.size(); ++k) {
      const Param& param = node.params[k];
      const std::string path = label("nodes", i, node.name) + "." + label("params", k, param.name);
      if (param.name.empty()) return fail(path + ".name", "empty (expected a parameter name)");
      auto [it, inserted] = param_index_.emplace(param.name, params_.size());
      if (!inserted) {
        return fail(path + ".name", "duplicate parameter name " + in_quotes(param.name) +
                                        " (first used by " + params_[it->second].path +
                                        "; a shared weight is a second entry with tied_to)");
      }
      params_.push_back(ParamRef{&param, path});
      if (param.buffer && (param.trainable || !param.tied_to.empty())) {
        return fail(path + ".buffer", "true on a trainable or tied parameter (expected a buffer to be "
                                      "\"trainable\": false and not tied: buffers are never trained)");
      }
      if (!param.persistent && !param.buffer) {
        return fail(path + ".persistent", "false on a parameter (expected only a buffer to be left out of "
                                          "the state dict: parameters are always in it)");
      }
      int64_t elements = 1;
      for (size_t d = 0; d < param.shape.size(); ++d) {
        const std::string field = path + ".shape[" + std::to_string(d) + "]";
        if (param.shape[d] <= 0) {
          return fail(field, std::to_string(param.shape[d]) + " (expected a positive dimension)");
        }
        if (__builtin_mul_overflow(elements, param.shape[d], &elements)) {
          return fail(path + ".shape",
                      "element count overflows int64 (expected a shape whose "
                      "product fits in 64 bits)");
        }
      }
      int64_t bits = 0;
      if (__builtin_mul_overflow(elements, int64_t{dtype_bits(param.dtype)}, &bits)) {
        return fail(path + ".shape",
                    "byte size overflows int64 (expected a shape whose size "
                    "in bits fits in 64 bits)");
      }
    }
  }
  return Status::ok();
}

Status Validator::check_tied_params() const {
  for (const ParamRef& ref : params_) {
    const Param& param = *ref.param;
    if (param.tied_to.empty()) continue;
    const std::string path = ref.path + ".tied_to";
    auto found = param_index_.find(param.tied_to);
    if (found == param_index_.end()) {
      return fail(path, "unknown parameter " + in_quotes(param.tied_to) +
                            " (expected the name of another parameter)");
    }
    // Chains would make "trainability follows the original" ambiguous, and a
    // parameter tied to itself would never be counted.
    const Param& target = *params_[found->second].param;
    if (&target == &param || !target.tied_to.empty()) {
      return fail(path, "parameter " + in_quotes(param.tied_to) +
                            " is itself tied or is this parameter (expected an untied "
                            "parameter)");
    }
    if (target.elements() != param.elements()) {
      return fail(path, "element count " + std::to_string(param.elements()) + " differs from " +
                            std::to_string(target.elements()) + " of " + in_quotes(param.tied_to) +
                            " (expected tied parameters to share one storage)");
    }
  }
  return Status::ok();
}

Status Validator::check_block_order() const {
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const Node& node = graph_.nodes[i];
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int producer = producer_[static_cast<size_t>(tensor_index_.at(node.inputs[k]))];
      if (producer < 0) continue;
      const Node& source = graph_.nodes[static_cast<size_t>(producer)];
      if (source.block > node.block) {
        return fail(label("nodes", i, node.name) + ".inputs[" + std::to_string(k) + "]",
                    "tensor " + in_quotes(node.inputs[k]) + " is produced in the later block " +
                        label("blocks", static_cast<size_t>(source.block),
                              graph_.blocks[static_cast<size_t>(source.block)].name) +
                        " (expected blocks to run in order)");
      }
    }
  }
  return Status::ok();
}

// Depth-first search records the first back edge and the DFS tree, from which
// the cycle is read off; back_edge(u, v) means v is an ancestor of u (or u itself).
using NodeGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
using Vertex = boost::graph_traits<NodeGraph>::vertex_descriptor;

class CycleFinder : public boost::default_dfs_visitor {
 public:
  CycleFinder(std::vector<Vertex>& parent, std::vector<Vertex>& back_edge)
      : parent_(&parent), back_edge_(&back_edge) {}
  template <typename Edge, typename Graph>
  void tree_edge(Edge edge, const Graph& graph) {
    (*parent_)[boost::target(edge, graph)] = boost::source(edge, graph);
  }
  template <typename Edge, typename Graph>
  void back_edge(Edge edge, const Graph& graph) {
    if (!back_edge_->empty()) return;
    back_edge_->push_back(boost::source(edge, graph));
    back_edge_->push_back(boost::target(edge, graph));
  }

 private:
  // Pointers: Boost copies visitors by value.
  std::vector<Vertex>* parent_;
  std::vector<Vertex>* back_edge_;
};

Status Validator::check_acyclic() const {
  NodeGraph dag(graph_.nodes.size());
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    for (const std::string& input : graph_.nodes[i].inputs) {
      const int producer = producer_[static_cast<size_t>(tensor_index_.at(input))];
      if (producer >= 0) boost::add_edge(static_cast<Vertex>(producer), i, dag);
    }
  }
  std::vector<Vertex> parent(graph_.nodes.size());
  std::vector<Vertex> back;
  boost::depth_first_search(dag, boost::visitor(CycleFinder(parent, back)));
  if (back.empty()) return Status::ok();
  // Walk the tree from the edge's source up to its target: that path plus the
  // back edge is the cycle.
  std::vector<Vertex> cycle{back[0]};
  while (cycle.back() != back[1]) cycle.push_back(parent[cycle.back()]);
  std::reverse(cycle.begin(), cycle.end());
  constexpr size_t kMaxNamesShown = 8;
  std::string path_text;
  for (size_t k = 0; k < cycle.size() && k < kMaxNamesShown; ++k) {
    path_text += in_quotes(graph_.nodes[cycle[k]].name) + " -> ";
  }
  if (cycle.size() > kMaxNamesShown) path_text += "... -> ";
  path_text += in_quotes(graph_.nodes[back[1]].name);
  return fail(
      label("nodes", back[1], graph_.nodes[back[1]].name),
      "on a cycle " + path_text + " (expected an acyclic graph: no tensor may depend on itself)");
}

}  // namespace

Status validate_graph(const LayerGraph& graph, std::string_view origin) {
  return Validator(graph, origin).run();
}

std::optional<int64_t> cap_max_seq_to_int64(LayerGraph& graph) {
  const SequenceSpec given = graph.sequence;
  if (given.max_seq <= 1) return std::nullopt;
  const auto valid_at = [&](int64_t seq) {
    graph.sequence.max_seq = seq;
    graph.sequence.default_seq = std::min(given.default_seq, seq);
    return validate_graph(graph, "graph").is_ok();
  };
  if (!valid_at(1)) {
    graph.sequence = given;
    return std::nullopt;
  }
  // Sizes grow with S: the valid lengths are a prefix [1, good].
  int64_t good = 1;
  int64_t bad = given.max_seq;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (valid_at(mid) ? good : bad) = mid;
  }
  valid_at(good);
  return given.max_seq;
}

}  // namespace headroom::graph
