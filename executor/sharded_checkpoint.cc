#include "executor/sharded_checkpoint.h"

#include <cstdio>
#include <set>
#include <sstream>

namespace headroom::executor {
namespace {

constexpr const char* kSlices = "slices/";

bool all_digits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

torch::Tensor long_scalar(int64_t value) { return torch::tensor(value, torch::kLong); }

// Splits "slices/<parameter>/<field>" at the last '/': parameter names hold dots, never slashes.
bool split_slice_key(const std::string& key, std::string& parameter, std::string& field) {
  if (key.rfind(kSlices, 0) != 0) return false;
  const std::string rest = key.substr(std::char_traits<char>::length(kSlices));
  const size_t slash = rest.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size()) return false;
  parameter = rest.substr(0, slash);
  field = rest.substr(slash + 1);
  return true;
}

std::string whole_key(const std::string& parameter, const std::string& state) {
  return state == "value" ? parameter : parameter + "/" + state;
}

}  // namespace

std::string rank_part_name(const std::string& kind, int rank, int world) {
  char text[64];
  std::snprintf(text, sizeof text, ".rank-%05d-of-%05d.pt", rank, world);
  return kind + text;
}

std::optional<RankPart> parse_rank_part_name(const std::string& name) {
  // KIND.rank-RRRRR-of-WWWWW.pt
  const size_t at = name.find(".rank-");
  if (at == std::string::npos || at == 0) return std::nullopt;
  const std::string tail = name.substr(at + 6);  // RRRRR-of-WWWWW.pt
  if (tail.size() != 5 + 4 + 5 + 3 || tail.substr(5, 4) != "-of-" || tail.substr(14) != ".pt") return std::nullopt;
  const std::string rank = tail.substr(0, 5);
  const std::string world = tail.substr(9, 5);
  if (!all_digits(rank) || !all_digits(world)) return std::nullopt;
  RankPart part{name.substr(0, at), std::stoi(rank), std::stoi(world)};
  if (part.world < 1 || part.rank >= part.world) return std::nullopt;
  return part;
}

std::string write_rank_part(int rank, int world, const std::vector<std::pair<std::string, torch::Tensor>>& header,
                            const std::vector<ParameterSlice>& slices) {
  torch::serialize::OutputArchive archive;
  archive.write("rank", long_scalar(rank));
  archive.write("world", long_scalar(world));
  for (const auto& [key, tensor] : header) archive.write(key, tensor);
  for (const ParameterSlice& slice : slices) {
    const std::string prefix = kSlices + slice.parameter + "/";
    archive.write(prefix + "begin", long_scalar(slice.begin));
    archive.write(prefix + "shape", torch::tensor(slice.shape, torch::kLong));
    for (const auto& [state, tensor] : slice.states) archive.write(prefix + state, tensor.detach().cpu().contiguous());
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

Result<ReadRankPart> read_rank_part(const std::string& bytes, const std::string& origin) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(bytes.data(), bytes.size());
  } catch (const c10::Error& e) {
    return Status::invalid_input(origin + ": not a rank part (" +
                                 std::string(e.what_without_backtrace()) + ")");
  }
  ReadRankPart part;
  std::map<std::string, ParameterSlice> by_parameter;
  std::map<std::string, std::set<std::string>> fields;
  for (const std::string& key : archive.keys()) {
    torch::Tensor tensor;
    archive.read(key, tensor);
    std::string parameter, field;
    if (!split_slice_key(key, parameter, field)) {
      part.header[key] = tensor;
      continue;
    }
    ParameterSlice& slice = by_parameter[parameter];
    slice.parameter = parameter;
    fields[parameter].insert(field);
    if (field == "begin") {
      slice.begin = tensor.item<int64_t>();
    } else if (field == "shape") {
      slice.shape = std::vector<int64_t>(tensor.data_ptr<int64_t>(), tensor.data_ptr<int64_t>() + tensor.numel());
    } else {
      slice.states.emplace_back(field, tensor.reshape(-1));
    }
  }
  if (!part.header.count("rank") || !part.header.count("world")) {
    return Status::invalid_input(
        origin + ": rank, world: missing (expected a rank part of a sharded checkpoint)");
  }
  part.rank = static_cast<int>(part.header.at("rank").item<int64_t>());
  part.world = static_cast<int>(part.header.at("world").item<int64_t>());
  part.header.erase("rank");
  part.header.erase("world");
  for (auto& [parameter, slice] : by_parameter) {
    if (!fields[parameter].count("begin") || !fields[parameter].count("shape") || slice.states.empty()) {
      return Status::invalid_input(origin + ": slices/" + parameter +
                                   ": expected begin, shape and at least one state");
    }
    const int64_t n = slice.states.front().second.numel();
    int64_t whole = 1;
    for (int64_t d : slice.shape) whole *= d;
    for (const auto& [state, tensor] : slice.states) {
      if (tensor.numel() != n) {
        return Status::invalid_input(
            origin + ": slices/" + parameter + "/" + state + ": " + std::to_string(tensor.numel()) +
            " elements, another state of the slice has " + std::to_string(n));
      }
    }
    if (slice.begin < 0 || slice.begin + n > whole) {
      return Status::invalid_input(
          origin + ": slices/" + parameter + ": elements [" + std::to_string(slice.begin) + ", " +
          std::to_string(slice.begin + n) + ") outside the parameter's " + std::to_string(whole));
    }
    part.slices.push_back(std::move(slice));
  }
  return part;
}

Result<std::string> assemble_whole(const std::map<std::string, std::string>& parts, const std::string& origin) {
  if (parts.empty()) return Status::invalid_input(origin + ": no rank parts to assemble");
  std::optional<RankPart> first = parse_rank_part_name(parts.begin()->first);
  if (!first)
    return Status::invalid_input(origin + "/" + parts.begin()->first + ": not a rank part's name");
  std::map<std::string, torch::Tensor> header;
  std::map<std::string, torch::Tensor> whole;           // key -> flat whole state
  std::map<std::string, std::vector<int64_t>> shapes;   // parameter -> whole shape
  std::map<std::string, int64_t> covered;               // key -> elements written
  std::set<int> ranks;
  for (const auto& [name, bytes] : parts) {
    const std::string where = origin + "/" + name;
    std::optional<RankPart> named = parse_rank_part_name(name);
    if (!named || named->kind != first->kind || named->world != first->world) {
      return Status::invalid_input(where + ": expected a part \"" +
                                   rank_part_name(first->kind, 0, first->world) +
                                   "\" of another rank of the same job");
    }
    Result<ReadRankPart> part = read_rank_part(bytes, where);
    if (!part.is_ok()) return part.status();
    if (part->rank != named->rank || part->world != named->world) {
      return Status::invalid_input(where + ": holds rank " + std::to_string(part->rank) + " of " +
                                   std::to_string(part->world) + ", not the rank its name says");
    }
    ranks.insert(part->rank);
    if (part->rank == 0) header = part->header;
    for (const ParameterSlice& slice : part->slices) {
      auto [known, fresh] = shapes.emplace(slice.parameter, slice.shape);
      if (!fresh && known->second != slice.shape) {
        return Status::invalid_input(where + ": " + slice.parameter +
                                     ": another shape than in another rank's part");
      }
      int64_t numel = 1;
      for (int64_t d : slice.shape) numel *= d;
      for (const auto& [state, tensor] : slice.states) {
        const std::string key = whole_key(slice.parameter, state);
        auto [it, created] = whole.emplace(key, torch::Tensor());
        if (created) it->second = torch::zeros({numel}, tensor.options());
        it->second.narrow(0, slice.begin, tensor.numel()).copy_(tensor);
        covered[key] += tensor.numel();
      }
    }
  }
  for (int r = 0; r < first->world; ++r) {
    if (!ranks.count(r)) {
      return Status::invalid_input(origin + ": " + rank_part_name(first->kind, r, first->world) +
                                   ": missing (every rank's part is needed to re-partition)");
    }
  }
  torch::serialize::OutputArchive archive;
  for (const auto& [key, tensor] : header) archive.write(key, tensor);
  for (auto& [key, flat] : whole) {
    const std::vector<int64_t>& shape = shapes.at(key.substr(0, key.find('/')));
    // Ranks own disjoint slices (each element once), so a count equal to the
    // parameter's means every element was written.
    if (covered.at(key) != flat.numel()) {
      return Status::invalid_input(origin + ": " + key + ": the ranks' slices cover " +
                                   std::to_string(covered.at(key)) + " of " +
                                   std::to_string(flat.numel()) + " elements");
    }
    archive.write(key, flat.view(shape));
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

}  // namespace headroom::executor
