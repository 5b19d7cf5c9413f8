#include "reports/line_edits.h"

#include <sstream>
#include <utility>

namespace headroom::reports {

LineEdits::LineEdits(std::string_view text) {
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    // A file saved on Windows: its lines are matched and edited without the '\r' (issue 37).
    const bool carriage = !line.empty() && line.back() == '\r';
    if (carriage) line.pop_back();
    lines_.push_back(line);
    carriage_.push_back(carriage);
  }
}

void LineEdits::replace(size_t index, std::string text) { replaced_[index] = std::move(text); }

void LineEdits::insert_before(size_t index, std::vector<std::string> text) {
  if (text.empty()) return;
  std::vector<std::string>& at = inserted_[index];
  at.insert(at.end(), std::make_move_iterator(text.begin()), std::make_move_iterator(text.end()));
}

std::string LineEdits::unified_diff(std::string_view path) const {
  std::ostringstream out;
  out << "--- " << path << "\n+++ " << path << "\n";
  // Each place edited is one hunk: the lines inserted before old line i, then
  // the replacement of line i if it has one.
  std::map<size_t, bool> places;
  for (const auto& [i, text] : inserted_) places[i] = false;
  for (const auto& [i, text] : replaced_) places[i] = true;
  long shift = 0;  // lines the hunks before this one added
  for (const auto& [i, replaces] : places) {
    std::vector<std::string> added;
    if (auto found = inserted_.find(i); found != inserted_.end()) added = found->second;
    if (replaces) added.push_back(replaced_.at(i));
    if (added.empty()) continue;
    const size_t removed = replaces ? 1 : 0;
    // A hunk that removes nothing names the line it follows (0: the top).
    const long old_start = removed ? static_cast<long>(i) + 1 : static_cast<long>(i);
    const long new_start = static_cast<long>(i) + shift + 1;
    out << "@@ -" << old_start << "," << removed << " +" << new_start << "," << added.size() << " @@\n";
    if (replaces) out << "-" << lines_[i] << end_of(i) << "\n";
    for (size_t a = 0; a < added.size(); ++a) {
      const bool replacement = replaces && a + 1 == added.size();
      out << "+" << added[a] << (replacement ? end_of(i) : inserted_end()) << "\n";
    }
    shift += static_cast<long>(added.size()) - static_cast<long>(removed);
  }
  return out.str();
}

std::string LineEdits::edited() const {
  std::ostringstream out;
  for (size_t i = 0; i <= lines_.size(); ++i) {
    if (auto found = inserted_.find(i); found != inserted_.end()) {
      for (const std::string& line : found->second) out << line << inserted_end() << "\n";
    }
    if (i == lines_.size()) break;
    auto replaced = replaced_.find(i);
    out << (replaced == replaced_.end() ? lines_[i] : replaced->second) << end_of(i) << "\n";
  }
  return out.str();
}

}  // namespace headroom::reports
