#include "planner/configs/config_import.h"

#include "graph/json_text.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// Appends `value` to `out` until `out` holds `max_chars`; deeper than
// kMaxJsonDepth it writes "...". Recursion is bounded by the depth check.
void append_excerpt(const json& value, size_t max_chars, int depth, std::string& out) {
  if (out.size() >= max_chars) return;
  if (depth > graph::kMaxJsonDepth) {
    out += "...";
    return;
  }
  if (value.is_string()) {
    // A long string is cut before it is escaped: its cost stays max_chars.
    const std::string& text = value.get_ref<const std::string&>();
    out += json(text.substr(0, max_chars - out.size() + 1)).dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  if (!value.is_structured()) {
    out += value.dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  const bool object = value.is_object();
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = value.begin(); it != value.end() && out.size() < max_chars; ++it) {
    if (!first) out += ',';
    first = false;
    if (object) out += json(it.key().substr(0, max_chars)).dump(-1, ' ', false, json::error_handler_t::replace) + ":";
    append_excerpt(it.value(), max_chars, depth + 1, out);
  }
  out += object ? '}' : ']';
}

}  // namespace

std::string json_excerpt(const json& value, size_t max_chars) {
  std::string out;
  append_excerpt(value, max_chars, 0, out);
  if (out.size() > max_chars) out = out.substr(0, max_chars >= 3 ? max_chars - 3 : 0) + "...";
  return out;
}

Status config_field_error(std::string_view origin, const std::string& path, const std::string& expected,
                          const nlohmann::json& got) {
  const std::string shown = got.is_null() ? "" : ", got " + json_excerpt(got, 80);
  return Status::invalid_input(std::string(origin) + ": " + path + ": expected " + expected +
                               shown);
}

std::string padded_batches_band(std::string_view shortest) {
  return " (the band's bottom), and over batches of lengths drawn from " + std::string(shortest) +
         " to it, whose sizes the allocator's cache grows on (its top; --shortest-sample N narrows it)";
}

void respell_notes(ConfigImport& imported, std::string_view from, std::string_view to) {
  const std::string prefix = std::string(from) + ":";
  for (std::string& note : imported.notes) {
    if (note.rfind(prefix, 0) == 0) note = std::string(to) + ":" + note.substr(prefix.size());
  }
}

}  // namespace headroom::planner
