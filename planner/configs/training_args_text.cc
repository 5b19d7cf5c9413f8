#include "planner/configs/training_args_text.h"

#include <algorithm>
#include <cctype>

namespace headroom::planner {

using nlohmann::json;

// Splits a shell-style command line: whitespace outside quotes separates words,
// a backslash before a newline continues the line. `unclosed` (optional) is set
// when a quote is still open at the end, which a shell refuses.
std::vector<std::string> shell_words(std::string_view text, bool* unclosed) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      ++i;
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else if (c == '#' && !in_word) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;  // a comment, to the end of the line
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  if (unclosed != nullptr) *unclosed = quote != 0;
  return words;
}

// HfArgumentParser's command line as a JSON object of strings: `--key value`,
// `--key=value`, a bare `--flag` (true), several words after one key joined by
// spaces (`--fsdp full_shard auto_wrap`). Words up to the script (the first
// word ending in .py, e.g. `torchrun --nproc_per_node 8 train.py`) are the
// launcher's and are skipped.
Result<json> arguments_object(std::string_view text, std::string_view origin) {
  bool unclosed = false;
  std::vector<std::string> words = shell_words(text, &unclosed);
  if (unclosed) {
    return Status::invalid_input(std::string(origin) + ": a quote is not closed (expected a command line a shell "
                                                       "reads: every ' and \" closed)");
  }
  const auto script = std::find_if(words.begin(), words.end(), [](const std::string& w) { return w.ends_with(".py"); });
  if (script != words.end()) words.erase(words.begin(), script + 1);
  if (words.empty()) {
    return Status::invalid_input(std::string(origin) +
                                 ": no arguments (expected TrainingArguments as JSON or a command line of --KEY VALUE "
                                 "arguments)");
  }
  json out = json::object();
  std::string key;
  for (const std::string& word : words) {
    if (word.starts_with("--")) {
      const size_t equals = word.find('=');
      key = word.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
      if (key.empty())
        return Status::invalid_input(std::string(origin) + ": \"" + word + "\": expected --KEY");
      if (out.contains(key))
        return Status::invalid_input(std::string(origin) + ": --" + key +
                                     ": given twice (expected once)");
      out[key] = equals == std::string::npos ? json(true) : json(word.substr(equals + 1));
      if (equals != std::string::npos) key.clear();
    } else if (!key.empty()) {
      json& value = out[key];
      value = value.is_string() ? json(value.get<std::string>() + " " + word) : json(word);
    } else {
      return Status::invalid_input(std::string(origin) + ": \"" + word +
                                   "\": expected --KEY VALUE arguments");
    }
  }
  return out;
}

}  // namespace headroom::planner
