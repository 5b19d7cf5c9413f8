#include "graph/graph_json.h"

#include <array>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "graph/atomic_file.h"
#include "graph/validate.h"

namespace headroom::graph {
namespace {

using nlohmann::json;

// Thrown only inside this file and turned into a Status at each public entry
// point: reading a nested format field by field is far clearer when a bad field
// can simply stop the read.
struct ParseError {
  std::string message;
};

constexpr std::array<std::pair<SaveWhen, std::string_view>, 4> kSaveWhenNames = {{
    {SaveWhen::kInputGrad, "input_grad"},
    {SaveWhen::kParamGrad, "param_grad"},
    {SaveWhen::kAnyGrad, "any_grad"},
    {SaveWhen::kOtherInputGrad, "other_input_grad"},
}};

constexpr std::array<std::pair<const char*, int64_t SizeExpr::*>, 6> kSizeTerms = {{
    {"c", &SizeExpr::c},
    {"b", &SizeExpr::b},
    {"s", &SizeExpr::s},
    {"bs", &SizeExpr::bs},
    {"ss", &SizeExpr::ss},
    {"bss", &SizeExpr::bss},
}};

std::string_view save_when_name(SaveWhen when) {
  for (const auto& [value, name] : kSaveWhenNames) {
    if (value == when) return name;
  }
  return "any_grad";  // unreachable for valid enum values
}

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

std::string join(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return std::string(path) + "." + std::string(key);
}

// "nodes[3] (\"fc1\")": the name helps find the entry; it is shown only when the
// element has a string "name".
std::string element_path(std::string_view path, size_t index, const json& element) {
  std::string out = std::string(path) + "[" + std::to_string(index) + "]";
  if (element.is_object()) {
    auto it = element.find("name");
    if (it != element.end() && it->is_string())
      out += " (" + in_quotes(it->get<std::string>()) + ")";
  }
  return out;
}

class Reader {
 public:
  explicit Reader(std::string_view origin) : origin_(origin) {}

  [[noreturn]] void fail(std::string_view path, const std::string& problem) const {
    std::string message = origin_.empty() ? "" : std::string(origin_) + ": ";
    throw ParseError{message + std::string(path) + ": " + problem};
  }

  [[noreturn]] void wrong_type(std::string_view path, const char* expected, const json& j) const {
    fail(path, std::string("expected ") + expected + ", got " + j.type_name());
  }

  // `j` must be an object whose keys are all in `known`.
  void object(const json& j, std::string_view path,
              std::initializer_list<std::string_view> known) const {
    if (!j.is_object()) wrong_type(path.empty() ? "(top level)" : path, "an object", j);
    for (const auto& item : j.items()) {
      bool found = false;
      for (std::string_view key : known) found = found || key == item.key();
      if (found) continue;
      std::string list;
      for (std::string_view key : known) list += (list.empty() ? "" : ", ") + std::string(key);
      fail(join(path, item.key()), "unknown key (expected one of " + list + ")");
    }
  }

  // The member `key`, or nullptr when it is absent and optional.
  const json* member(const json& j, std::string_view path, const char* key, bool required) const {
    auto it = j.find(key);
    if (it != j.end()) return &*it;
    if (required) fail(join(path, key), "missing required field");
    return nullptr;
  }

  std::string string(const json& j, std::string_view path) const {
    if (!j.is_string()) wrong_type(path, "a string", j);
    return j.get<std::string>();
  }
  bool boolean(const json& j, std::string_view path) const {
    if (!j.is_boolean()) wrong_type(path, "true or false", j);
    return j.get<bool>();
  }
  int64_t integer(const json& j, std::string_view path) const {
    if (!j.is_number_integer()) wrong_type(path, "an integer", j);
    if (j.is_number_unsigned() &&
        j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(path, "integer out of range (expected at most " +
                     std::to_string(std::numeric_limits<int64_t>::max()) + ")");
    }
    return j.get<int64_t>();
  }
  int small_integer(const json& j, std::string_view path) const {
    const int64_t value = integer(j, path);
    if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
      fail(path, "integer out of range (expected a 32-bit value)");
    }
    return static_cast<int>(value);
  }
  const json& array(const json& j, std::string_view path) const {
    if (!j.is_array()) wrong_type(path, "an array", j);
    return j;
  }
  std::vector<std::string> strings(const json& j, std::string_view path) const {
    std::vector<std::string> out;
    for (size_t i = 0; i < array(j, path).size(); ++i) {
      out.push_back(string(j[i], std::string(path) + "[" + std::to_string(i) + "]"));
    }
    return out;
  }
  DType dtype(const json& j, std::string_view path) const {
    const std::string text = string(j, path);
    const auto parsed = parse_dtype(text);
    if (!parsed) {
      fail(path, "unknown dtype " + in_quotes(text) + " (expected one of " +
                     std::string(dtype_names_list()) + ")");
    }
    return *parsed;
  }
  SaveWhen save_when(const json& j, std::string_view path) const {
    const std::string text = string(j, path);
    for (const auto& [value, name] : kSaveWhenNames) {
      if (name == text) return value;
    }
    fail(path, "unknown condition " + in_quotes(text) +
                   " (expected one of input_grad, param_grad, any_grad, other_input_grad)");
  }
  SizeExpr size(const json& j, std::string_view path) const {
    SizeExpr out;
    if (j.is_number_integer()) {
      out.c = integer(j, path);
    } else if (j.is_object()) {
      object(j, path, {"c", "b", "s", "bs", "ss", "bss", "per"});
      for (const auto& [key, term] : kSizeTerms) {
        if (const json* value = member(j, path, key, false))
          out.*term = integer(*value, join(path, key));
      }
      if (const json* value = member(j, path, "per", false)) {
        out.per = integer(*value, join(path, "per"));
        if (out.per < 1) fail(join(path, "per"), "expected a positive divisor, got " + std::to_string(out.per));
      }
    } else {
      wrong_type(path, "an integer or an object with keys c, b, s, bs, ss, bss, per", j);
    }
    if (out.any_negative()) {
      fail(path, "negative coefficient in " + out.to_string() + " (expected non-negative counts)");
    }
    return out;
  }

  SequenceSpec sequence(const json& j, std::string_view path) const;
  Block block(const json& j, std::string_view path) const;
  Tensor tensor(const json& j, std::string_view path) const;
  Param param(const json& j, std::string_view path) const;
  Node node(const json& j, std::string_view path) const;
  LayerGraph graph(const json& j) const;

 private:
  std::string_view origin_;
};

SequenceSpec Reader::sequence(const json& j, std::string_view path) const {
  object(j, path,
         {"unit", "default_seq", "max_seq", "patch_px", "images", "extra_tokens",
          "default_resolution"});
  SequenceSpec out;
  out.unit = string(*member(j, path, "unit", true), join(path, "unit"));
  out.default_seq = integer(*member(j, path, "default_seq", true), join(path, "default_seq"));
  out.max_seq = integer(*member(j, path, "max_seq", true), join(path, "max_seq"));
  const std::pair<const char*, int64_t*> optional_fields[] = {
      {"patch_px", &out.patch_px},
      {"images", &out.images},
      {"extra_tokens", &out.extra_tokens},
      {"default_resolution", &out.default_resolution},
  };
  for (const auto& [key, field] : optional_fields) {
    if (const json* value = member(j, path, key, false)) *field = integer(*value, join(path, key));
  }
  return out;
}

Block Reader::block(const json& j, std::string_view path) const {
  object(j, path, {"name", "kind", "checkpointable"});
  Block out;
  out.name = string(*member(j, path, "name", true), join(path, "name"));
  out.kind = string(*member(j, path, "kind", true), join(path, "kind"));
  out.checkpointable =
      boolean(*member(j, path, "checkpointable", true), join(path, "checkpointable"));
  return out;
}

Tensor Reader::tensor(const json& j, std::string_view path) const {
  object(j, path, {"name", "elements", "dtype", "requires_grad", "min_seq"});
  Tensor out;
  out.name = string(*member(j, path, "name", true), join(path, "name"));
  out.elements = size(*member(j, path, "elements", true), join(path, "elements"));
  if (const json* value = member(j, path, "dtype", false))
    out.dtype = dtype(*value, join(path, "dtype"));
  if (const json* value = member(j, path, "requires_grad", false)) {
    out.requires_grad = boolean(*value, join(path, "requires_grad"));
  }
  if (const json* value = member(j, path, "min_seq", false)) {
    out.min_seq = integer(*value, join(path, "min_seq"));
    if (out.min_seq < 0) fail(join(path, "min_seq"), "expected a sequence length >= 0");
  }
  return out;
}

Param Reader::param(const json& j, std::string_view path) const {
  object(j, path, {"name", "shape", "dtype", "trainable", "tied_to", "buffer", "persistent", "upcast_fp32"});
  Param out;
  out.name = string(*member(j, path, "name", true), join(path, "name"));
  const std::string shape_path = join(path, "shape");
  const json& shape = array(*member(j, path, "shape", true), shape_path);
  for (size_t i = 0; i < shape.size(); ++i) {
    out.shape.push_back(integer(shape[i], shape_path + "[" + std::to_string(i) + "]"));
  }
  out.dtype = dtype(*member(j, path, "dtype", true), join(path, "dtype"));
  out.trainable = boolean(*member(j, path, "trainable", true), join(path, "trainable"));
  if (const json* value = member(j, path, "tied_to", false)) {
    out.tied_to = string(*value, join(path, "tied_to"));
  }
  if (const json* value = member(j, path, "buffer", false)) {
    out.buffer = boolean(*value, join(path, "buffer"));
  }
  if (const json* value = member(j, path, "persistent", false)) {
    out.persistent = boolean(*value, join(path, "persistent"));
  }
  if (const json* value = member(j, path, "upcast_fp32", false)) {
    out.upcast_fp32 = boolean(*value, join(path, "upcast_fp32"));
  }
  return out;
}

Node Reader::node(const json& j, std::string_view path) const {
  object(j, path,
         {"name", "op", "block", "inputs", "outputs", "holds", "params", "saves", "fwd_flops",
          "bwd_input_flops", "bwd_param_flops", "fwd_io_elements", "workspace_elements",
          "bwd_workspace_elements", "fwd_io_f32_elements", "linear"});
  Node out;
  out.name = string(*member(j, path, "name", true), join(path, "name"));
  out.op = string(*member(j, path, "op", true), join(path, "op"));
  out.block = small_integer(*member(j, path, "block", true), join(path, "block"));
  out.inputs = strings(*member(j, path, "inputs", true), join(path, "inputs"));
  out.outputs = strings(*member(j, path, "outputs", true), join(path, "outputs"));
  if (const json* holds = member(j, path, "holds", false)) out.holds = strings(*holds, join(path, "holds"));
  const std::string params_path = join(path, "params");
  const json& params = array(*member(j, path, "params", true), params_path);
  for (size_t i = 0; i < params.size(); ++i) {
    out.params.push_back(param(params[i], element_path(params_path, i, params[i])));
  }
  const std::string saves_path = join(path, "saves");
  const json& saves = array(*member(j, path, "saves", true), saves_path);
  for (size_t i = 0; i < saves.size(); ++i) {
    const std::string save_path = saves_path + "[" + std::to_string(i) + "]";
    object(saves[i], save_path, {"tensor", "when"});
    SavedRef ref;
    ref.tensor = string(*member(saves[i], save_path, "tensor", true), join(save_path, "tensor"));
    ref.when = save_when(*member(saves[i], save_path, "when", true), join(save_path, "when"));
    out.saves.push_back(ref);
  }
  const std::pair<const char*, SizeExpr*> sizes[] = {
      {"fwd_flops", &out.fwd_flops},
      {"bwd_input_flops", &out.bwd_input_flops},
      {"bwd_param_flops", &out.bwd_param_flops},
      {"fwd_io_elements", &out.fwd_io_elements},
      {"workspace_elements", &out.workspace_elements},
  };
  for (const auto& [key, field] : sizes)
    *field = size(*member(j, path, key, true), join(path, key));
  if (const json* bwd_workspace = member(j, path, "bwd_workspace_elements", false)) {
    out.bwd_workspace_elements = size(*bwd_workspace, join(path, "bwd_workspace_elements"));
  }
  if (const json* f32_io = member(j, path, "fwd_io_f32_elements", false)) {
    out.fwd_io_f32_elements = size(*f32_io, join(path, "fwd_io_f32_elements"));
  }
  if (const json* linear = member(j, path, "linear", false)) {
    const std::string linear_path = join(path, "linear");
    object(*linear, linear_path, {"in_features", "out_features", "rows"});
    LinearInfo info;
    info.in_features = integer(*member(*linear, linear_path, "in_features", true),
                               join(linear_path, "in_features"));
    info.out_features = integer(*member(*linear, linear_path, "out_features", true),
                                join(linear_path, "out_features"));
    info.rows = size(*member(*linear, linear_path, "rows", true), join(linear_path, "rows"));
    out.linear = info;
  }
  return out;
}

LayerGraph Reader::graph(const json& j) const {
  // Format and version first: a file of another format or a later version
  // deserves that message, not one about its first unfamiliar key.
  if (!j.is_object()) wrong_type("(top level)", "an object", j);
  const std::string format = string(*member(j, "", "format", true), "format");
  if (format != kLayerGraphFormatName) {
    fail("format", in_quotes(format) + " (expected " + in_quotes(kLayerGraphFormatName) + ")");
  }
  LayerGraph out;
  out.version = small_integer(*member(j, "", "version", true), "version");
  if (out.version != kLayerGraphFormatVersion) {
    fail("version", "unsupported version " + std::to_string(out.version) + " (expected " +
                        std::to_string(kLayerGraphFormatVersion) + ")");
  }
  object(j, "",
         {"format", "version", "name", "family", "description", "source", "sequence",
          "lora_targets", "blocks", "tensors", "nodes"});
  out.name = string(*member(j, "", "name", true), "name");
  out.family = string(*member(j, "", "family", true), "family");
  out.description = string(*member(j, "", "description", true), "description");
  out.source = string(*member(j, "", "source", true), "source");
  out.sequence = sequence(*member(j, "", "sequence", true), "sequence");
  out.lora_targets = strings(*member(j, "", "lora_targets", true), "lora_targets");
  const json& blocks = array(*member(j, "", "blocks", true), "blocks");
  for (size_t i = 0; i < blocks.size(); ++i) {
    out.blocks.push_back(block(blocks[i], element_path("blocks", i, blocks[i])));
  }
  const json& tensors = array(*member(j, "", "tensors", true), "tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.tensors.push_back(tensor(tensors[i], element_path("tensors", i, tensors[i])));
  }
  const json& nodes = array(*member(j, "", "nodes", true), "nodes");
  for (size_t i = 0; i < nodes.size(); ++i) {
    out.nodes.push_back(node(nodes[i], element_path("nodes", i, nodes[i])));
  }
  return out;
}

json sequence_to_json(const SequenceSpec& seq) {
  json out = {{"unit", seq.unit}, {"default_seq", seq.default_seq}, {"max_seq", seq.max_seq}};
  // Image fields only where they mean something or differ from the defaults,
  // so token models stay short and the round trip stays exact.
  const SequenceSpec defaults;
  const bool image = seq.unit == "image";
  if (image || seq.patch_px != defaults.patch_px) out["patch_px"] = seq.patch_px;
  if (image || seq.images != defaults.images) out["images"] = seq.images;
  if (image || seq.extra_tokens != defaults.extra_tokens) out["extra_tokens"] = seq.extra_tokens;
  if (image || seq.default_resolution != defaults.default_resolution) {
    out["default_resolution"] = seq.default_resolution;
  }
  return out;
}

json node_to_json(const Node& node) {
  json params = json::array();
  for (const Param& param : node.params) {
    json p = {{"name", param.name},
              {"shape", param.shape},
              {"dtype", dtype_name(param.dtype)},
              {"trainable", param.trainable}};
    if (!param.tied_to.empty()) p["tied_to"] = param.tied_to;
    if (param.buffer) p["buffer"] = true;
    if (!param.persistent) p["persistent"] = false;
    if (param.upcast_fp32) p["upcast_fp32"] = true;
    params.push_back(std::move(p));
  }
  json saves = json::array();
  for (const SavedRef& ref : node.saves) {
    saves.push_back({{"tensor", ref.tensor}, {"when", save_when_name(ref.when)}});
  }
  json out = {{"name", node.name},
              {"op", node.op},
              {"block", node.block},
              {"inputs", node.inputs},
              {"outputs", node.outputs},
              {"params", std::move(params)},
              {"saves", std::move(saves)},
              {"fwd_flops", size_expr_to_json(node.fwd_flops)},
              {"bwd_input_flops", size_expr_to_json(node.bwd_input_flops)},
              {"bwd_param_flops", size_expr_to_json(node.bwd_param_flops)},
              {"fwd_io_elements", size_expr_to_json(node.fwd_io_elements)},
              {"workspace_elements", size_expr_to_json(node.workspace_elements)}};
  if (!node.holds.empty()) out["holds"] = node.holds;
  if (node.bwd_workspace_elements) out["bwd_workspace_elements"] = size_expr_to_json(*node.bwd_workspace_elements);
  if (!node.fwd_io_f32_elements.is_zero()) {
    out["fwd_io_f32_elements"] = size_expr_to_json(node.fwd_io_f32_elements);
  }
  if (node.linear) {
    out["linear"] = {{"in_features", node.linear->in_features},
                     {"out_features", node.linear->out_features},
                     {"rows", size_expr_to_json(node.linear->rows)}};
  }
  return out;
}

bool params_equal(const Param& a, const Param& b) {
  return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype &&
         a.trainable == b.trainable && a.tied_to == b.tied_to && a.buffer == b.buffer &&
         a.persistent == b.persistent && a.upcast_fp32 == b.upcast_fp32;
}

bool nodes_equal(const Node& a, const Node& b) {
  if (a.params.size() != b.params.size() || a.saves.size() != b.saves.size()) return false;
  for (size_t i = 0; i < a.params.size(); ++i) {
    if (!params_equal(a.params[i], b.params[i])) return false;
  }
  for (size_t i = 0; i < a.saves.size(); ++i) {
    if (a.saves[i].tensor != b.saves[i].tensor || a.saves[i].when != b.saves[i].when) return false;
  }
  if (a.linear.has_value() != b.linear.has_value()) return false;
  if (a.linear &&
      (a.linear->in_features != b.linear->in_features ||
       a.linear->out_features != b.linear->out_features || a.linear->rows != b.linear->rows)) {
    return false;
  }
  return a.name == b.name && a.op == b.op && a.block == b.block && a.inputs == b.inputs && a.holds == b.holds &&
         a.outputs == b.outputs && a.fwd_flops == b.fwd_flops &&
         a.bwd_input_flops == b.bwd_input_flops && a.bwd_param_flops == b.bwd_param_flops &&
         a.fwd_io_elements == b.fwd_io_elements && a.workspace_elements == b.workspace_elements &&
         a.bwd_workspace_elements == b.bwd_workspace_elements && a.fwd_io_f32_elements == b.fwd_io_f32_elements;
}

bool sequences_equal(const SequenceSpec& a, const SequenceSpec& b) {
  return a.unit == b.unit && a.default_seq == b.default_seq && a.max_seq == b.max_seq &&
         a.patch_px == b.patch_px && a.images == b.images && a.extra_tokens == b.extra_tokens &&
         a.default_resolution == b.default_resolution;
}

}  // namespace

json size_expr_to_json(const SizeExpr& expr) {
  if (expr == SizeExpr::constant(expr.c)) return expr.c;
  json out = json::object();
  for (const auto& [key, term] : kSizeTerms) {
    if (expr.*term != 0) out[key] = expr.*term;
  }
  if (expr.per > 1) out["per"] = expr.per;
  return out;
}

Result<SizeExpr> size_expr_from_json(const json& value, std::string_view field_path) {
  try {
    return Reader("").size(value, field_path);
  } catch (const ParseError& error) {
    return Status::invalid_input(error.message);
  }
}

json graph_to_json(const LayerGraph& graph) {
  json blocks = json::array();
  for (const Block& block : graph.blocks) {
    blocks.push_back(
        {{"name", block.name}, {"kind", block.kind}, {"checkpointable", block.checkpointable}});
  }
  json tensors = json::array();
  for (const Tensor& tensor : graph.tensors) {
    json t = {{"name", tensor.name}, {"elements", size_expr_to_json(tensor.elements)}};
    if (tensor.dtype) t["dtype"] = dtype_name(*tensor.dtype);
    if (tensor.requires_grad) t["requires_grad"] = true;
    if (tensor.min_seq > 0) t["min_seq"] = tensor.min_seq;
    tensors.push_back(std::move(t));
  }
  json nodes = json::array();
  for (const Node& node : graph.nodes) nodes.push_back(node_to_json(node));
  return {{"format", kLayerGraphFormatName},
          {"version", graph.version},
          {"name", graph.name},
          {"family", graph.family},
          {"description", graph.description},
          {"source", graph.source},
          {"sequence", sequence_to_json(graph.sequence)},
          {"lora_targets", graph.lora_targets},
          {"blocks", std::move(blocks)},
          {"tensors", std::move(tensors)},
          {"nodes", std::move(nodes)}};
}

Result<LayerGraph> graph_from_json(const json& value, std::string_view origin) {
  LayerGraph graph;
  try {
    graph = Reader(origin).graph(value);
  } catch (const ParseError& error) {
    return Status::invalid_input(error.message);
  }
  if (Status status = validate_graph(graph, origin); !status.is_ok()) return status;
  return graph;
}

Result<LayerGraph> load_graph_file(const std::string& path) {
  Result<std::string> text = read_file(path, kMaxGraphFileBytes);
  if (!text.is_ok()) return text.status();
  Result<json> parsed = parse_json_text(text.value(), path);
  if (!parsed.is_ok()) return parsed.status();
  return graph_from_json(parsed.value(), path);
}

Status save_graph_file(const LayerGraph& graph, const std::string& path) {
  if (Status status = validate_graph(graph, path); !status.is_ok()) return status;
  std::string text;
  try {
    text = graph_to_json(graph).dump(2) + "\n";
  } catch (const json::type_error& error) {
    // dump() refuses strings that are not UTF-8.
    return Status::invalid_input(path + ": cannot write the graph as JSON: " + error.what());
  }
  return write_file_atomic(path, text);
}

bool graphs_equal(const LayerGraph& a, const LayerGraph& b) {
  if (a.version != b.version || a.name != b.name || a.family != b.family ||
      a.description != b.description || a.source != b.source ||
      !sequences_equal(a.sequence, b.sequence) || a.lora_targets != b.lora_targets ||
      a.blocks.size() != b.blocks.size() || a.tensors.size() != b.tensors.size() ||
      a.nodes.size() != b.nodes.size()) {
    return false;
  }
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    const Block& x = a.blocks[i];
    const Block& y = b.blocks[i];
    if (x.name != y.name || x.kind != y.kind || x.checkpointable != y.checkpointable) return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor& x = a.tensors[i];
    const Tensor& y = b.tensors[i];
    if (x.name != y.name || x.elements != y.elements || x.dtype != y.dtype ||
        x.requires_grad != y.requires_grad || x.min_seq != y.min_seq) {
      return false;
    }
  }
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    if (!nodes_equal(a.nodes[i], b.nodes[i])) return false;
  }
  return true;
}

}  // namespace headroom::graph
