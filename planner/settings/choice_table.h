// One table per enum-valued setting: each value with the name the flags, the
// JSON form and the messages use. Names, parsers and the "a, b, c" lists that
// messages and --help give are all read from the table, so a choice is written
// once (settings/run_settings.cc, stack_choices.cc, weight_formats.cc).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace headroom::planner {

template <typename E, std::size_t N>
struct ChoiceTable {
  std::array<std::pair<E, std::string_view>, N> rows;

  std::string_view name(E value) const {
    for (const auto& [key, text] : rows) {
      if (key == value) return text;
    }
    return "?";
  }
  std::optional<E> parse(std::string_view text) const {
    for (const auto& [key, name] : rows) {
      if (name == text) return key;
    }
    return std::nullopt;
  }
  // "a, b, c", in the table's order.
  std::string names() const {
    std::string out;
    for (const auto& [key, text] : rows) out += (out.empty() ? "" : ", ") + std::string(text);
    return out;
  }
};

template <typename E, std::size_t N>
ChoiceTable(std::array<std::pair<E, std::string_view>, N>) -> ChoiceTable<E, N>;

}  // namespace headroom::planner
