#include "planner/configs/yaml_config.h"

#include <yaml.h>

#include <charconv>
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <regex>

#include "graph/json_text.h"
#include "graph/utf8.h"
#include "planner/configs/config_import.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

Status error_at(std::string_view origin, size_t line, size_t column, const std::string& what) {
  return Status::invalid_input(std::string(origin) + ": line " + std::to_string(line + 1) +
                               ", column " + std::to_string(column + 1) + ": " + what);
}

// Whether PyYAML's resolver takes `text` for an integer (YAML 1.1): decimal, 0b
// binary, 0x hexadecimal, a leading 0 octal, base-60 with colons (1:30 is 90),
// underscores anywhere after the prefix.
bool yaml11_integer_form(const std::string& text) {
  static const std::regex form(
      R"([-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+)");
  return text.size() <= 64 && std::regex_match(text, form);
}

// The value of a `text` in yaml11_integer_form, as construct_yaml_int reads it;
// nullopt when it leaves int64 (a reader refuses that as a count).
std::optional<int64_t> yaml11_integer(const std::string& text) {
  std::string digits;
  for (char c : text) {
    if (c != '_') digits += c;
  }
  const bool negative = digits[0] == '-';
  if (digits[0] == '-' || digits[0] == '+') digits.erase(0, 1);
  int64_t value = 0;
  // `base` 60 reads one base-60 digit written in decimal (the part between colons);
  // any other base reads the whole number, beyond int64 refused by from_chars.
  const auto add_digits = [&](std::string_view part, int base) {
    int64_t piece = 0;
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), piece, base == 60 ? 10 : base);
    if (part.empty() || error != std::errc{} || end != part.data() + part.size()) return false;
    return !__builtin_mul_overflow(value, base == 60 ? 60 : 1, &value) && !__builtin_add_overflow(value, piece, &value);
  };
  bool ok = true;
  if (digits.find(':') != std::string::npos) {
    size_t start = 0;
    while (ok && start <= digits.size()) {
      const size_t colon = std::min(digits.find(':', start), digits.size());
      ok = add_digits(std::string_view(digits).substr(start, colon - start), 60);
      start = colon + 1;
    }
  } else if (digits.starts_with("0b")) {
    ok = add_digits(std::string_view(digits).substr(2), 2);
  } else if (digits.starts_with("0x")) {
    ok = add_digits(std::string_view(digits).substr(2), 16);
  } else if (digits.size() > 1 && digits[0] == '0') {
    ok = add_digits(std::string_view(digits).substr(1), 8);
  } else {
    ok = add_digits(digits, 10);
  }
  if (!ok) return std::nullopt;
  return negative ? -value : value;
}

// A plain scalar as PyYAML's SafeLoader resolves it (YAML 1.1): null, booleans,
// integers (yaml11_integer), floats (OmegaConf's resolver also takes 2e-5
// without a dot); anything else is a string. NaN and infinities stay strings: a
// reader refuses them where it wants a number.
json resolve_plain(const std::string& text) {
  static const std::set<std::string> nulls = {"", "~", "null", "Null", "NULL"};
  static const std::set<std::string> trues = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const std::set<std::string> falses = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  if (nulls.count(text)) return nullptr;
  if (trues.count(text)) return true;
  if (falses.count(text)) return false;
  static const std::regex floating(R"([-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?)");
  if (yaml11_integer_form(text)) {
    const std::optional<int64_t> integer = yaml11_integer(text);
    return integer ? json(*integer) : json(text);  // beyond int64: a reader refuses it as a count
  }
  if (text.size() <= 64 && std::regex_match(text, floating)) {
    std::string digits;
    for (char c : text) {
      if (c != '_') digits += c;
    }
    double value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error == std::errc{} && end == digits.data() + digits.size() && std::isfinite(value)) return value;
  }
  return text;
}

struct ParserDeleter {
  void operator()(yaml_parser_t* parser) const {
    yaml_parser_delete(parser);
    delete parser;
  }
};

// Builds JSON from libyaml's events, one document, mappings with scalar keys.
class Builder {
 public:
  Builder(std::string_view text, std::string_view origin) : origin_(origin), parser_(new yaml_parser_t) {
    yaml_parser_initialize(parser_.get());
    yaml_parser_set_input_string(parser_.get(), reinterpret_cast<const unsigned char*>(text.data()), text.size());
  }

  Result<json> document() {
    json root;
    bool seen_document = false;
    while (true) {
      Result<Event> event = next();
      if (!event.is_ok()) return event.status();
      const yaml_event_type_t type = event->get()->type;
      if (type == YAML_STREAM_END_EVENT) break;
      if (type == YAML_STREAM_START_EVENT || type == YAML_DOCUMENT_END_EVENT) continue;
      if (type == YAML_DOCUMENT_START_EVENT) {
        if (seen_document) return at(*event->get(), "a second document; expected one");
        seen_document = true;
        continue;
      }
      Result<json> node = value(std::move(event.value()), 0);
      if (!node.is_ok()) return node.status();
      root = std::move(node.value());
    }
    return root;
  }

 private:
  struct EventDeleter {
    void operator()(yaml_event_t* event) const {
      yaml_event_delete(event);
      delete event;
    }
  };
  using Event = std::unique_ptr<yaml_event_t, EventDeleter>;

  Result<Event> next() {
    Event event(new yaml_event_t);
    if (!yaml_parser_parse(parser_.get(), event.get())) {
      // libyaml left nothing to delete in the event on failure.
      yaml_event_t* raw = event.release();
      delete raw;
      const yaml_parser_t& p = *parser_;
      return error_at(origin_, p.problem_mark.line, p.problem_mark.column,
                      std::string(p.problem ? p.problem : "YAML syntax error") +
                          (p.context ? std::string(" ") + p.context : ""));
    }
    return event;
  }

  Status at(const yaml_event_t& event, const std::string& what) const {
    return error_at(origin_, event.start_mark.line, event.start_mark.column, what);
  }

  // An explicit tag other than the core schema's str, seq and map: PyYAML's safe
  // loader, under OmegaConf and torchtune, refuses it (!!python/object...), so the
  // tool would not run the config headroom answered for.
  Status refuse_tag(const yaml_event_t& e) const {
    const unsigned char* tag = e.type == YAML_SCALAR_EVENT           ? e.data.scalar.tag
                               : e.type == YAML_SEQUENCE_START_EVENT ? e.data.sequence_start.tag
                               : e.type == YAML_MAPPING_START_EVENT  ? e.data.mapping_start.tag
                                                                     : nullptr;
    if (tag == nullptr) return Status::ok();
    const std::string name(reinterpret_cast<const char*>(tag));
    if (name == "tag:yaml.org,2002:str" || name == "tag:yaml.org,2002:seq" || name == "tag:yaml.org,2002:map") {
      return Status::ok();
    }
    return at(e, "a YAML tag (" + name + "); expected plain values, as a safe YAML loader reads them");
  }

  Result<json> value(Event event, int depth) {
    if (depth > graph::kMaxJsonDepth) return at(*event, "nesting deeper than " + std::to_string(graph::kMaxJsonDepth));
    const yaml_event_t& e = *event;
    if (Status tagged = refuse_tag(e); !tagged.is_ok()) return tagged;
    switch (e.type) {
      case YAML_ALIAS_EVENT:
        return at(e, "an alias (*name); expected plain values");
      case YAML_SCALAR_EVENT: {
        const std::string text(reinterpret_cast<const char*>(e.data.scalar.value), e.data.scalar.length);
        if (e.data.scalar.style != YAML_PLAIN_SCALAR_STYLE || e.data.scalar.tag != nullptr) return json(text);
        return resolve_plain(text);
      }
      case YAML_SEQUENCE_START_EVENT: {
        json out = json::array();
        while (true) {
          Result<Event> item = next();
          if (!item.is_ok()) return item.status();
          if (item->get()->type == YAML_SEQUENCE_END_EVENT) return out;
          Result<json> element = value(std::move(item.value()), depth + 1);
          if (!element.is_ok()) return element.status();
          out.push_back(std::move(element.value()));
        }
      }
      case YAML_MAPPING_START_EVENT: {
        json out = json::object();
        while (true) {
          Result<Event> key = next();
          if (!key.is_ok()) return key.status();
          const yaml_event_t& k = *key->get();
          if (k.type == YAML_MAPPING_END_EVENT) return out;
          if (k.type != YAML_SCALAR_EVENT) return at(k, "a key that is not a plain name; expected name: value");
          if (Status tagged = refuse_tag(k); !tagged.is_ok()) return tagged;
          const std::string name(reinterpret_cast<const char*>(k.data.scalar.value), k.data.scalar.length);
          // OmegaConf refuses a key given twice in one mapping.
          if (out.contains(name)) return at(k, name + ": the key is given twice (expected once)");
          Result<Event> item = next();
          if (!item.is_ok()) return item.status();
          Result<json> element = value(std::move(item.value()), depth + 1);
          if (!element.is_ok()) return element.status();
          out[name] = std::move(element.value());
        }
      }
      default:
        return at(e, "an unexpected YAML event");
    }
  }

  std::string_view origin_;
  std::unique_ptr<yaml_parser_t, ParserDeleter> parser_;
};

Result<json> parse_yaml(std::string_view text, std::string_view origin) {
  if (const std::optional<size_t> bad = graph::first_invalid_utf8(text)) {
    return Status::invalid_input(std::string(origin) + ": byte " + std::to_string(*bad) +
                                 ": expected UTF-8 text");
  }
  // YAML allows no C0 control character but tab and line breaks.
  const size_t control = text.find_first_of(std::string_view("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f"
                                                             "\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b"
                                                             "\x1c\x1d\x1e\x1f\x7f",
                                                             30));
  if (control != std::string_view::npos) {
    return Status::invalid_input(
        std::string(origin) + ": byte " + std::to_string(control) +
        ": a control character; expected YAML text (tabs and line breaks only)");
  }
  return Builder(text, origin).document();
}

// Levels of nesting in `value` (a scalar: 0). Bounded: the values it sees come
// from parse_yaml, which refuses more than kMaxJsonDepth.
int nesting(const json& value) {
  int deepest = 0;
  if (value.is_structured()) {
    for (const json& element : value) deepest = std::max(deepest, nesting(element));
    return deepest + 1;
  }
  return 0;
}

// An override as messages show it: cut to 80 characters (a key can be 100 kB).
std::string shown_override(const std::string& text) {
  return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

// KEY of an override split at its dots; an error unless every part is non-empty.
Result<std::vector<std::string>> override_key(const std::string& text, std::string_view origin) {
  const bool remove = text.starts_with("~");
  const size_t equals = text.find('=');
  const std::string key = remove ? text.substr(1) : text.substr(0, equals);
  if ((!remove && equals == std::string::npos) || key.empty() || key.front() == '.' || key.back() == '.' ||
      key.find("..") != std::string::npos) {
    return Status::invalid_input(std::string(origin) + ": override \"" + shown_override(text) +
                                 "\": expected KEY=VALUE or ~KEY");
  }
  std::vector<std::string> parts;
  for (size_t start = 0, dot; start <= key.size(); start = dot + 1) {
    dot = key.find('.', start);
    if (dot == std::string::npos) dot = key.size();
    parts.push_back(key.substr(start, dot - start));
  }
  return parts;
}

// torchtune's command-line overrides (OmegaConf dot-list): KEY=VALUE sets a
// nested key, the value read as YAML (True, 8, null, [a, b]); ~KEY removes one.
// The config's depth limit holds for what an override builds too.
Status apply_override(json& root, const std::string& text, std::string_view origin) {
  Result<std::vector<std::string>> key = override_key(text, origin);
  if (!key.is_ok()) return key.status();
  const std::vector<std::string>& parts = key.value();
  const bool remove = text.starts_with("~");
  json value;
  if (!remove) {
    Result<json> parsed = parse_yaml(text.substr(text.find('=') + 1),
                                     std::string(origin) + ": override \"" + shown_override(text) + "\"");
    if (!parsed.is_ok()) return parsed.status();
    value = std::move(parsed.value());
  }
  const size_t depth = parts.size() + static_cast<size_t>(nesting(value));
  if (depth > static_cast<size_t>(graph::kMaxJsonDepth)) {
    return Status::invalid_input(std::string(origin) + ": override \"" + shown_override(text) + "\": nests " +
                                 std::to_string(depth) + " levels deep; expected at most " +
                                 std::to_string(graph::kMaxJsonDepth));
  }
  json* node = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    json& next = (*node)[parts[i]];
    if (!next.is_object()) {
      if (remove) return Status::ok();
      next = json::object();
    }
    node = &next;
  }
  if (remove) {
    node->erase(parts.back());
  } else {
    (*node)[parts.back()] = std::move(value);
  }
  return Status::ok();
}

}  // namespace

Result<json> parse_yaml_config(std::string_view text, std::string_view origin, std::string_view what,
                               const std::vector<std::string>& overrides) {
  Result<json> root = parse_yaml(text, origin);
  if (!root.is_ok()) return root.status();
  if (!root->is_object())
    return Status::invalid_input(std::string(origin) + ": expected a mapping of keys (" +
                                 std::string(what) + ")");
  for (const std::string& override_text : overrides) {
    if (Status applied = apply_override(root.value(), override_text, origin); !applied.is_ok()) return applied;
  }
  return root;
}

const json& YamlReader::at(const std::string& path) {
  static const json kNull;
  read_.insert(path);
  const json* node = &root_;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(part)) return kNull;
    node = &node->at(part);
    if (dot == std::string::npos) return *node;
    start = dot + 1;
  }
}

bool YamlReader::boolean_or(const std::string& path, bool fallback) {
  const json& v = at(path);
  if (v.is_null()) return fallback;
  if (v.is_boolean()) return v.get<bool>();
  fail(path, "true or false", v);
  return fallback;
}

int64_t YamlReader::count_or(const std::string& path, int64_t fallback) {
  const json& v = at(path);
  if (v.is_null()) return fallback;
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxYamlCount) {
    fail(path, "a positive whole number of at most 2^24", v);
    return fallback;
  }
  return v.get<int64_t>();
}

double YamlReader::number_or(const std::string& path, double fallback) {
  const json& v = at(path);
  if (v.is_null()) return fallback;
  if (!v.is_number()) {
    fail(path, "a number", v);
    return fallback;
  }
  return v.get<double>();
}

std::string YamlReader::string_or(const std::string& path, const std::string& fallback) {
  const json& v = at(path);
  if (v.is_null()) return fallback;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());  // fsdp_sharding_strategy: 1
  fail(path, "a string", v);
  return fallback;
}

std::vector<std::string> YamlReader::strings(const std::string& path) {
  const json& v = at(path);
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (!v.is_array()) {
    fail(path, "a list of names", v);
    return out;
  }
  for (const json& item : v) {
    if (!item.is_string()) {
      fail(path, "a list of names", v);
      return {};
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

void YamlReader::fail(const std::string& path, const std::string& expected, const json& got) {
  if (!status_.is_ok()) return;
  status_ = config_field_error(origin_, path, expected, got);
}

bool YamlReader::read_below(const std::string& path) const {
  for (const std::string& r : read_) {
    if (r == path || r.starts_with(path + ".")) return true;
  }
  return false;
}

void YamlReader::collect(const json& node, const std::string& path, std::vector<std::string>& out) const {
  for (const auto& [name, value] : node.items()) {
    const std::string key = yaml_join(path, name);
    if (read_.count(key)) continue;
    if (value.is_object() && read_below(key)) {
      collect(value, key, out);
    } else {
      out.push_back(key);
    }
  }
}

std::vector<std::string> YamlReader::unread() const {
  std::vector<std::string> out;
  collect(root_, "", out);
  return out;
}

}  // namespace headroom::planner
