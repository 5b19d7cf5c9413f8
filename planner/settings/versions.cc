#include "planner/settings/versions.h"

#include <array>
#include <cctype>
#include <charconv>

#include "planner/settings/versions_help.h"

namespace headroom::planner {
namespace {

// What each release changes is cited in docs/stacks.md, "Releases".
constexpr std::array<VersionedPackage, 7> kPackages = {{
    {"transformers",
     "the Trainer's loss (an fp32 shifted copy before 4.49), its default optimizer (fused AdamW from 4.54 with "
     "torch 2.8) and SDPA over grouped K/V (copied to every head before 4.54)"},
    {"torch", "whether transformers >= 4.54 defaults to fused AdamW (torch 2.8 and later)"},
    {"peft", "the LoRA adapters' dtype (the base weight's before 0.12, fp32 from 0.12)"},
    {"torchtune", "RMSNorm's normalized tensor, kept for the scale's gradient: 16-bit before 0.5, fp32 from 0.5"},
    {"accelerate",
     "the Trainer's FSDP2 units: from 1.14 the input embeddings and the final norm with the head are units of their "
     "own (the head's kept from its forward to its backward), before 1.14 both in the root group"},
    {"trl", "SFTTrainer's loss (from 1.15 a fused LM head that never builds the logits) and QLoRA's adapters "
            "(bf16 from 0.26)"},
    {"bitsandbytes",
     "QLoRA's 4-bit linears: each keeps its input for backward up to 0.43.1, and one fed fp32 dequantizes its "
     "weight to fp32 up to 0.46"},
}};

}  // namespace

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

Status add_version(std::string_view entry, std::string_view origin, PackageVersions& out) {
  const size_t equals = entry.find('=');
  const auto fail = [&](const std::string& what) {
    const std::string where = origin.empty() ? "" : std::string(origin) + ": versions: ";
    return Status::invalid_input(where + "'" + std::string(entry) + "': " + what);
  };
  if (equals == std::string_view::npos) return fail("expected NAME=RELEASE, e.g. transformers=4.44.2");
  const std::string name = normalized_package_name(trimmed(entry.substr(0, equals)));
  std::string_view release = entry.substr(equals + 1);
  if (!release.empty() && release.front() == '=') release.remove_prefix(1);
  release = trimmed(release);
  if (find_versioned_package(name) == nullptr) {
    return fail("expected a package whose release changes the price: " + versioned_package_names());
  }
  if (!parse_release(release)) return fail("expected a release such as 4.44.2");
  out[name] = std::string(release);
  return Status::ok();
}

std::optional<Release> parse_release(std::string_view text) {
  text = text.substr(0, text.find('+'));  // the local part: "2.8.0+cu128"
  int parts[3] = {0, 0, 0};
  const char* at = text.data();
  const char* const end = at + text.size();
  for (int i = 0; i < 3; ++i) {
    if (at == end || !std::isdigit(static_cast<unsigned char>(*at))) return std::nullopt;
    const auto [next, error] = std::from_chars(at, end, parts[i]);
    if (error != std::errc()) return std::nullopt;
    at = next;
    // The end, a pre/dev/post tag ("rc1", ".dev0" after three numbers), or the next number.
    if (at == end || *at != '.' || i == 2) break;
    ++at;
  }
  if (at != end && *at != '.' && !std::isalpha(static_cast<unsigned char>(*at))) return std::nullopt;
  return Release{parts[0], parts[1], parts[2]};
}

const VersionedPackage* find_versioned_package(std::string_view name) {
  for (const VersionedPackage& package : kPackages) {
    if (package.name == name) return &package;
  }
  return nullptr;
}

std::string versions_flag_help() {
  std::string out = "the library releases the run uses, where a release changes what is allocated: ";
  for (size_t i = 0; i < kPackages.size(); ++i) {
    out += (i == 0 ? "" : "; ") + std::string(kPackages[i].name) + " (" + std::string(kPackages[i].changes) + ")";
  }
  return out + "; e.g. transformers=4.44.2,peft=0.12.0. Without them the band covers the releases that differ "
               "(docs/stacks.md, \"Releases\")";
}

std::string versioned_package_names() {
  std::string out;
  for (const VersionedPackage& package : kPackages) out += (out.empty() ? "" : ", ") + std::string(package.name);
  return out;
}

std::string normalized_package_name(std::string_view name) {
  std::string out;
  for (char c : name) {
    const bool separator = c == '-' || c == '_' || c == '.';
    if (separator) {
      if (out.empty() || out.back() != '-') out += '-';
      continue;
    }
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

Status parse_versions(std::string_view text, std::string_view origin, PackageVersions& out) {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view entry = trimmed(text.substr(0, comma));
    if (!entry.empty()) {
      if (Status status = add_version(entry, origin, out); !status.is_ok()) return status;
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return Status::ok();
}

std::optional<Release> release_of(const PackageVersions& versions, std::string_view package) {
  const auto found = versions.find(std::string(package));
  if (found == versions.end()) return std::nullopt;
  return parse_release(found->second);
}

std::string versions_text(const PackageVersions& versions) {
  std::string out;
  for (const auto& [name, release] : versions) out += (out.empty() ? "" : ", ") + name + " " + release;
  return out;
}

}  // namespace headroom::planner
