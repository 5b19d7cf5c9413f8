// YAML configs read with libyaml into JSON (planner/configs/yaml_config.h): PyYAML's
// scalar resolution, and what is refused before a reader sees it.
#include <doctest/doctest.h>

#include <string>

#include "planner/configs/config_import.h"
#include "planner/configs/yaml_config.h"

namespace headroom::planner {

TEST_CASE("plain scalars resolve as PyYAML's safe loader does, quoted ones stay strings") {
  Result<nlohmann::json> doc = parse_yaml_config(
      "a: 128_256\nb: 2e-5\nc: 0.3\nd: True\ne: no\nf: 'no'\ng: null\nh: ~\ni: -7\nj: text\nk: [1, x]\nl: .nan\n", "c.yaml",
      "a test");
  REQUIRE_MESSAGE(doc.is_ok(), doc.message());
  const nlohmann::json& j = doc.value();
  CHECK(j["a"] == 128256);
  CHECK(j["b"].get<double>() == doctest::Approx(2e-5));
  CHECK(j["c"].get<double>() == doctest::Approx(0.3));
  CHECK(j["d"] == true);
  CHECK(j["e"] == false);  // YAML 1.1
  CHECK(j["f"] == "no");
  CHECK(j["g"].is_null());
  CHECK(j["h"].is_null());
  CHECK(j["i"] == -7);
  CHECK(j["j"] == "text");
  CHECK(j["k"] == nlohmann::json::array({1, "x"}));
  CHECK(j["l"] == ".nan");  // not a number a reader will take
}

TEST_CASE("integers in every YAML 1.1 form PyYAML reads: hex, octal, binary, base 60 (issue 37 item 8)") {
  Result<nlohmann::json> doc = parse_yaml_config(
      "a: 0x10\nb: 010\nc: 0b1010\nd: 1:30\ne: -0x1_0\nf: 0o17\ng: 99999999999999999999\nh: 0\ni: +12\n",
      "c.yaml", "a test");
  REQUIRE_MESSAGE(doc.is_ok(), doc.message());
  const nlohmann::json& j = doc.value();
  CHECK(j["a"] == 16);
  CHECK(j["b"] == 8);  // a leading 0 is octal in YAML 1.1
  CHECK(j["c"] == 10);
  CHECK(j["d"] == 90);
  CHECK(j["e"] == -16);
  CHECK(j["f"] == "0o17");  // YAML 1.2's prefix: a string to PyYAML
  CHECK(j["g"] == "99999999999999999999");  // beyond int64: left for a reader to refuse
  CHECK(j["h"] == 0);
  CHECK(j["i"] == 12);
}

TEST_CASE("overrides set and remove nested keys, values read as YAML") {
  Result<nlohmann::json> doc =
      parse_yaml_config("optimizer:\n  lr: 1\nbatch_size: 4\n", "c.yaml", "a test",
                        {"optimizer.fused=True", "~batch_size", "dataset.packed=true", "tokenizer.max_seq_len=4096"});
  REQUIRE_MESSAGE(doc.is_ok(), doc.message());
  CHECK(doc.value()["optimizer"]["fused"] == true);
  CHECK_FALSE(doc.value().contains("batch_size"));
  CHECK(doc.value()["tokenizer"]["max_seq_len"] == 4096);
}

TEST_CASE("refused before reading: a second document, deep nesting, non-mapping roots, bad overrides") {
  CHECK(parse_yaml_config("a: 1\n---\nb: 2\n", "c.yaml", "x").message().find("a second document") != std::string::npos);
  std::string deep = "a: ";
  for (int i = 0; i < 100; ++i) deep += "[";
  CHECK(parse_yaml_config(deep, "c.yaml", "x").message().find("nesting deeper than 64") != std::string::npos);
  CHECK(parse_yaml_config("- 1\n- 2\n", "c.yaml", "a list").message() ==
        "c.yaml: expected a mapping of keys (a list)");
  CHECK(parse_yaml_config("a: 1\n", "c.yaml", "x", {"=3"}).message().find("expected KEY=VALUE or ~KEY") !=
        std::string::npos);
  CHECK(parse_yaml_config("? [a, b]\n: 1\n", "c.yaml", "x").message().find("a key that is not a plain name") !=
        std::string::npos);
}

}  // namespace headroom::planner

namespace headroom::planner {

// Issue 37: a --torchtune-set key of 50,000 levels got past the 64-level limit
// (the document nested as deep, and a reader's recursion crashed).
TEST_CASE("an override nests no deeper than the config may: its key and its value together") {
  std::string key = "a";
  for (int level = 1; level < 50000; ++level) key += ".a";
  Result<nlohmann::json> deep = parse_yaml_config("x: 1\n", "c.yaml", "a test", {key + "=1"});
  REQUIRE_FALSE(deep.is_ok());
  CHECK(deep.message().find("nests 50000 levels deep; expected at most 64") != std::string::npos);
  CHECK(deep.message().size() < 300);  // the key is shown cut, not whole
  std::string key64 = "a";
  for (int level = 1; level < 64; ++level) key64 += ".a";
  CHECK(parse_yaml_config("x: 1\n", "c.yaml", "a test", {key64 + "=1"}).is_ok());
  // 60 levels of key and a value nested 5 deep: 65.
  Result<nlohmann::json> both = parse_yaml_config("x: 1\n", "c.yaml", "a test", {key64.substr(0, 119) + "=[[[[[1]]]]]"});
  REQUIRE_FALSE(both.is_ok());
  CHECK(both.message().find("nests 65 levels deep") != std::string::npos);
}

TEST_CASE("json_excerpt is bounded by its length, whatever the value's depth or size") {
  nlohmann::json deep = 1;
  for (int level = 0; level < 2000; ++level) deep = nlohmann::json::array({std::move(deep)});
  const std::string shown = json_excerpt(deep, 80);
  CHECK(shown.size() <= 80);
  CHECK(shown.starts_with("[[[["));
  CHECK(json_excerpt(nlohmann::json(std::string(10'000'000, 'x')), 80).size() <= 80);
  CHECK(json_excerpt(nlohmann::json{{"a", 1}}, 80) == R"({"a":1})");
  const Status error = config_field_error("c.json", "model", "an object", deep);
  CHECK(error.message().size() < 200);
}

}  // namespace headroom::planner
