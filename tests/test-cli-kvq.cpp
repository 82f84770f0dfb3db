// `precompute --kv-bits` and the store commands on a quantised store, through the binary, on
// testdata/rag-mini: the encoding in precompute's JSON, store.json and `store stats/verify`; the
// store keeps one encoding (another --kv-bits is an error, none resumes); a flipped bit and a
// truncated 4-bit file found by verify and rewritten byte for byte by precompute and repair;
// answer reads the store without a cache miss.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"
#include "core/util/file-io.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ragkv::test::run_ragkv;
using ragkv::test::TempDir;

constexpr auto q = &ragkv::test::shell_quote;

void flip_byte(const fs::path& p, std::streamoff at) {
  std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(at);
  char c = 0;
  io.get(c);
  io.seekp(at);
  io.put(char(c ^ 0x08));
}

}  // namespace

TEST_CASE("cli kvq: precompute --kv-bits 4, one encoding per store, stats, verify and repair" * doctest::test_suite("real-model")) {
  TempDir tmp("cli-kvq");
  const fs::path index = tmp.path / "index", store = tmp.path / "store";
  auto r = run_ragkv("build-index --threads 2 --corpus " + q(ragkv::test::testdata("rag-mini.corpus.jsonl")) +
                     " --out " + q(index));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string pc = "precompute --threads 2 --neighbours 0 --index " + q(index) + " --store " + q(store);
  r = run_ragkv(pc + " --kv-bits 4");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json j = json::parse(r.out);
  CHECK(j["computed"] == 6);
  CHECK(j["kv_dtype"] == "q4");
  CHECK(j["kv_bytes_per_token"] == 7200.0);  // 30 layers × (2 × 96 code bytes + 48 bytes of scales and mins)
  const json sj = json::parse(ragkv::read_file(store / "store.json"));
  CHECK(sj["dtype"] == "q4");
  CHECK(sj["format_version"] == 2);

  r = run_ragkv(pc + " --kv-bits 8");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("holds q4 KV caches (--kv-bits 4), not q8 (--kv-bits 8): a store has one encoding") != std::string::npos);
  r = run_ragkv(pc + " --kv-bits 3");
  CHECK(r.exit_code == 2);
  r = run_ragkv(pc);  // no --kv-bits: the store's own encoding, every chunk already there
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["skipped"] == 6);
  CHECK(json::parse(r.out)["kv_dtype"] == "q4");

  std::vector<std::pair<fs::path, std::string>> original;
  for (const auto& e : fs::directory_iterator(store / "kv")) original.emplace_back(e.path(), ragkv::read_file(e.path()));
  std::sort(original.begin(), original.end());
  REQUIRE(original.size() == 7);
  auto same_as_original = [&] {
    for (const auto& [p, bytes] : original) {
      INFO(p.string());
      REQUIRE(fs::exists(p));
      CHECK(ragkv::read_file(p) == bytes);
    }
  };

  r = run_ragkv("store stats --store " + q(store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  j = json::parse(r.out);
  CHECK(j["kv_dtype"] == "q4");
  CHECK(j["kv_bits"] == 4);
  CHECK(j["kv_bytes_per_token"] == 7200.0);
  CHECK(j["per_dtype"]["q4"]["files"] == 6);
  CHECK(j["per_dtype"]["f16"]["files"] == 1);  // the instruction prefix stays f16
  CHECK(j["per_dtype"]["f16"]["bytes_per_token"].get<double>() > 23040);  // its header on few tokens
  const double q4_rate = j["per_dtype"]["q4"]["bytes_per_token"];
  CHECK(q4_rate > 7200);  // the last K group of a chunk is partial, plus the header
  CHECK(q4_rate < 8600);

  r = run_ragkv("store verify --store " + q(store));
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["intact"] == 7);
  CHECK(json::parse(r.out)["kv_dtype"] == "q4");

  // A flipped bit in a 4-bit chunk's layer: verify names the file and its layer; precompute
  // rewrites it, byte for byte (quantisation is deterministic).
  const fs::path victim = original[3].first;
  flip_byte(victim, std::streamoff(fs::file_size(victim) - 100));
  r = run_ragkv("store verify --store " + q(store));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(victim.string() + ": layer 29 checksum mismatch") != std::string::npos);
  r = run_ragkv(pc);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["computed"].get<int>() + json::parse(r.out)["skipped"].get<int>() == 6);
  same_as_original();

  // store repair --index: a truncated 4-bit file removed and computed again in the store's encoding.
  fs::resize_file(original[5].first, fs::file_size(original[5].first) - 1);
  r = run_ragkv("store repair --threads 2 --store " + q(store) + " --index " + q(index));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["removed"] == 1);
  CHECK(json::parse(r.out)["still_missing"] == 0);
  same_as_original();

  // answer reads every cache of the quantised store.
  const fs::path answers = tmp.path / "answers.jsonl";
  r = run_ragkv("answer " + q(ragkv::test::testdata("rag-mini.queries.jsonl")) + " --threads 2 --index " + q(index) +
                " --store " + q(store) + " --mode blend --limit 2 --max-tokens 4 --top-k 3 --out " + q(answers));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::ifstream in(answers);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const json a = json::parse(line);
    CHECK(a["metrics"]["cache_misses"] == 0);
    CHECK(a["metrics"]["cache_bad"] == 0);
  }
  CHECK(lines == 2);
}
