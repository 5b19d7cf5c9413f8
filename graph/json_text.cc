#include "graph/json_text.h"

#include <string>
#include <utility>
#include <vector>

namespace headroom::graph {
namespace {

using nlohmann::json;

// Builds the document from nlohmann's SAX events. nlohmann's own callback
// parser rescans the parent container each time an object closes, which made
// parsing quadratic in the number of entries (issue 14: 23.5 s for a
// safetensors header of 40k tensors); this builder does constant work per
// event. The stack holds the open containers: a pointer into an array stays
// valid because nothing is appended to an array while one of its children is
// open.
class StrictDomBuilder {
 public:
  explicit StrictDomBuilder(std::string_view origin) : origin_(origin) {}

  bool null() { return place(json(nullptr)); }
  bool boolean(bool value) { return place(json(value)); }
  bool number_integer(json::number_integer_t value) { return place(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return place(json(value)); }
  bool number_float(json::number_float_t value, const std::string& /*text*/) { return place(json(value)); }
  bool string(std::string& value) { return place(json(std::move(value))); }
  bool binary(json::binary_t& value) { return place(json::binary(std::move(value))); }  // not in JSON text

  bool start_object(std::size_t /*elements*/) { return open(json::value_t::object); }
  bool start_array(std::size_t /*elements*/) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& key) {
    json& object = *open_.back().container;
    if (object.contains(key)) {
      open_.back().key = key;
      return fail(field_path() + ": duplicate key (expected each key once)");
    }
    open_.back().key = key;
    open_.back().pending = &object[key];
    return true;
  }

  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::detail::exception& error) {
    if (!message_.empty()) return false;  // a refusal of ours stopped the parse
    // what() is "[json.exception.parse_error.101] parse error at line 1, column 5: ...".
    std::string what = error.what();
    const size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    if (error.id == 406) {  // out_of_range.406: a number that overflows a double
      return fail(field_path() + ": number overflow: " + last_token +
                  " does not fit a double (expected numbers a double can hold, up to about 1.8e308)");
    }
    message_ = std::string(origin_) + ": invalid JSON at byte " + std::to_string(position) + ": " + what;
    return false;
  }

  json take() { return std::move(root_); }
  const std::string& message() const { return message_; }

 private:
  struct Open {
    json* container = nullptr;
    std::string key;          // objects: the key being read
    json* pending = nullptr;  // objects: where that key's value goes
  };

  bool fail(const std::string& what) {
    message_ = std::string(origin_) + ": " + what;
    return false;
  }

  // Where the next value goes: the root, the end of the open array, or the
  // slot of the open object's current key.
  json* slot_for(json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Open& parent = open_.back();
    if (parent.container->is_array()) {
      parent.container->push_back(std::move(value));
      return &parent.container->back();
    }
    *parent.pending = std::move(value);
    return parent.pending;
  }

  bool place(json&& value) {
    slot_for(std::move(value));
    return true;
  }

  bool open(json::value_t type) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      message_ = std::string(origin_) + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                 " levels (expected a flatter file)";
      return false;
    }
    json* container = slot_for(json(type));
    open_.push_back(Open{container, {}, nullptr});
    return true;
  }

  bool close() {
    open_.pop_back();
    return true;
  }

  // "zero_optimization.stage", "steps[3].loss": where the parse is now.
  std::string field_path() const {
    std::string path;
    for (size_t level = 0; level < open_.size(); ++level) {
      const Open& o = open_[level];
      if (o.container->is_array()) {
        // An open child was appended already; the innermost array's next value was not.
        const size_t size = o.container->size();
        const size_t index = level + 1 < open_.size() ? size - 1 : size;
        path += "[" + std::to_string(index) + "]";
      } else if (!o.key.empty() || o.pending != nullptr) {
        path += (path.empty() ? "" : ".") + o.key;
      }
    }
    return path.empty() ? "(top level)" : path;
  }

  std::string_view origin_;
  json root_;
  std::vector<Open> open_;
  std::string message_;
};

}  // namespace

Result<json> parse_json_text(std::string_view text, std::string_view origin) {
  StrictDomBuilder builder(origin);
  const bool parsed = json::sax_parse(text.begin(), text.end(), &builder);
  if (!parsed) {
    if (builder.message().empty())
      return Status::invalid_input(std::string(origin) + ": invalid JSON");
    return Status::invalid_input(builder.message());
  }
  return builder.take();
}

}  // namespace headroom::graph
