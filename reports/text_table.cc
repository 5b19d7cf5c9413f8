#include "reports/text_table.h"

#include <algorithm>
#include <utility>

namespace headroom::reports {

TextTable::TextTable(std::vector<std::string> header)
    : header_(std::move(header)), left_(header_.size(), false) {
  if (!left_.empty()) left_[0] = true;
}

void TextTable::add_row(std::vector<std::string> cells) {
  cells.resize(std::max(cells.size(), header_.size()));
  rows_.push_back(std::move(cells));
}

void TextTable::set_left_aligned(size_t column) {
  if (column >= left_.size()) left_.resize(column + 1, false);
  left_[column] = true;
}

std::string TextTable::render(int indent) const {
  size_t columns = header_.size();
  for (const auto& row : rows_) columns = std::max(columns, row.size());
  std::vector<size_t> widths(columns, 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);

  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line(static_cast<size_t>(std::max(indent, 0)), ' ');
    for (size_t c = 0; c < columns; ++c) {
      const std::string cell = c < row.size() ? row[c] : std::string();
      const std::string pad(widths[c] - cell.size(), ' ');
      const bool left = c < left_.size() && left_[c];
      if (c > 0) line += "  ";
      line += left ? cell + pad : pad + cell;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header_);
  for (const auto& row : rows_) emit(row);
  return out;
}

}  // namespace headroom::reports
