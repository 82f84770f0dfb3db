// `bench reuse` on a tiny random model: the rows, the tiers, ratios taken against full, the
// temporary store cleaned up. Timing values are not checked (machines are noisy); the structure,
// recompute fractions and prefix mode's identity with full are.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/backend/cpu-backend.h"
#include "bench/reuse-bench.h"
#include "core/util/error.h"
#include "core/model/random-model.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

using namespace ragkv;
namespace fs = std::filesystem;

namespace {
// A 3-layer random llama with a 1,024-token context in dir; one thread, one timed repetition.
ReuseBenchOptions small_bench(const test::TempDir& dir, int chunks, int chunk_tokens) {
  RandomModelSpec s;
  s.n_layer = 3;
  s.n_ctx = 1024;
  ReuseBenchOptions o;
  o.model_path = (dir.path / "random-llama.gguf").string();
  write_random_model(s, o.model_path);
  o.threads = 1;
  o.chunks = chunks;
  o.chunk_tokens = chunk_tokens;
  o.repetitions = 1;
  return o;
}

// TMPDIR (so fs::temp_directory_path()) points at dir for the scope: a temporary store the bench
// makes lands in the test's own directory, not in the shared system temp dir.
struct TmpdirIn : ragkv::test::ScopedEnv {
  explicit TmpdirIn(const fs::path& dir) : ScopedEnv("TMPDIR", dir.string()) {}
};

// Sends this process's stderr (fd 2) to file until text() is called, which restores it and returns
// what was written.
struct StderrToFile {
  fs::path file;
  int saved = -1;
  explicit StderrToFile(fs::path f) : file(std::move(f)) {
    std::fflush(stderr);
    saved = ::dup(2);
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(saved >= 0);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
  }
  std::string text() {
    restore();
    std::ifstream in(file);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void restore() {
    if (saved < 0) return;
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    saved = -1;
  }
  ~StderrToFile() { restore(); }
  StderrToFile(const StderrToFile&) = delete;
  StderrToFile& operator=(const StderrToFile&) = delete;
};
}  // namespace

TEST_CASE("bench reuse: one full row, a row per mode and tier, fractions and prefix identity") {
  test::TempDir dir("bench-reuse");
  ReuseBenchOptions o = small_bench(dir, 3, 40);
  o.store_dir = (dir.path / "store").string();
  const nlohmann::json j = bench_reuse(*make_cpu_backend(1), o);
  CHECK(j["bench"] == "reuse");
  CHECK(j["chunks"] == 3);
  const auto& rows = j["results"];
  REQUIRE(rows.size() == 1 + 3 * 4);
  std::set<std::string> seen;
  for (const auto& r : rows) {
    const std::string mode = r["mode"], tier = r["kv_tier"];
    seen.insert(mode + "/" + tier);
    CHECK(r["ttft_ms_best"].get<double>() > 0);
    CHECK(r["ttft_ms_best"].get<double>() <= r["ttft_ms_median"].get<double>());
    const double f = r["compute_fraction"];
    if (mode == "full") {
      CHECK(tier == "none");
      CHECK(f == 1.0);
      CHECK(r["ttft_ratio_vs_full"].get<double>() == 1.0);
      CHECK(r["prefill_tflops"].get<double>() > 0);
    } else {
      CHECK(r["kv_bytes_loaded"].get<uint64_t>() > 0);
      CHECK(f < 1.0);
      CHECK(r.contains("host_fill_ms_median") == (tier == "host"));
      CHECK(r.contains("device_fill_ms") == (tier == "device"));
      // Device-resident KV is copied in place: reuse and blend start no file loader.
      if (tier == "device" && mode != "prefix") CHECK(r["load_ms_median"].get<double>() == 0.0);
      if (tier != "device" && mode != "prefix") CHECK(r["load_ms_median"].get<double>() > 0.0);
    }
    if (mode == "prefix") {  // bit-identical to full whatever tier the KV came from
      CHECK(r["first_token_matches_full"] == true);
      CHECK(r["kl_first_token_vs_full"].get<double>() == doctest::Approx(0.0).epsilon(1e-12));
    }
  }
  CHECK(seen.size() == rows.size());
  // Every tier computes the same thing: the first token's KL with full is the same number.
  for (const auto& r : rows)
    for (const auto& o : rows)
      if (r["mode"] == o["mode"]) CHECK(r["kl_first_token_vs_full"].get<double>() == o["kl_first_token_vs_full"].get<double>());
  auto fraction = [&](const std::string& mode) {
    for (const auto& r : rows)
      if (r["mode"] == mode) return r["compute_fraction"].get<double>();
    return -1.0;
  };
  CHECK(fraction("reuse") < fraction("blend"));
  CHECK(fraction("prefix") > fraction("reuse"));
  CHECK(fs::exists(dir.path / "store" / "store.json"));  // a given store is kept
}

TEST_CASE("bench reuse: a temporary store is removed, and a prompt past the context is an error") {
  test::TempDir dir("bench-reuse-tmp");
  ReuseBenchOptions o = small_bench(dir, 2, 16);
  o.modes = {ModeSpec(ReuseMode::reuse)};
  o.tiers = {KvStart::disk};
  // The bench makes its temporary store under the temp dir, pointed here at a directory of the
  // test's own (bench/) so that only this run's store can be there; it names the store on stderr.
  const fs::path tmp = dir.path / "bench";
  fs::create_directory(tmp);
  nlohmann::json j;
  std::string err;
  {
    const TmpdirIn in(tmp);
    StderrToFile capture(dir.path / "stderr.txt");
    j = bench_reuse(*make_cpu_backend(1), o);
    err = capture.text();
    REQUIRE(j["results"].size() == 1);  // full is timed for the ratio but not listed
    CHECK(j["results"][0]["mode"] == "reuse");
    CHECK(j["results"][0]["kv_tier"] == "disk");
    CHECK_FALSE(fs::exists(fs::temp_directory_path() / ("ragkv-bench-reuse-" + std::to_string(::getpid()))));
  }
  const fs::path store = tmp / ("ragkv-bench-reuse-" + std::to_string(::getpid()));
  CAPTURE(err);
  CHECK(err.find("precomputing the chunk caches into " + store.string() + "\n") != std::string::npos);  // it was used
  CHECK(fs::is_empty(tmp));  // and removed, with everything in it

  o.chunks = 20;
  o.chunk_tokens = 100;
  CHECK_THROWS_WITH_AS(bench_reuse(*make_cpu_backend(1), o), doctest::Contains("exceeds the model's context"), Error);
  CHECK_THROWS_WITH_AS(parse_kv_start("gpu"), doctest::Contains("expected disk, page-cache, host, device or remote"), Error);
}

TEST_CASE("bench reuse: --kv-bits 16,4 times every cached row on both stores, the 4-bit files smaller") {
  test::TempDir dir("bench-reuse-kvq");
  ReuseBenchOptions o = small_bench(dir, 2, 64);
  o.store_dir = (dir.path / "store").string();
  o.modes = {ModeSpec(ReuseMode::reuse)};
  o.tiers = {KvStart::page_cache, KvStart::host};
  o.kv_bits = {16, 4};
  const nlohmann::json j = bench_reuse(*make_cpu_backend(1), o);
  REQUIRE(j["stores"].size() == 2);
  CHECK(j["stores"][0]["kv_dtype"] == "f16");
  CHECK(j["stores"][1]["kv_dtype"] == "q4");
  CHECK(j["stores"][1]["store_bytes"].get<uint64_t>() < j["stores"][0]["store_bytes"].get<uint64_t>());
  CHECK(fs::exists(dir.path / "store" / "q4" / "store.json"));
  const auto& rows = j["results"];
  REQUIRE(rows.size() == 2 * 2);
  std::map<std::string, uint64_t> file_bytes;
  for (const auto& r : rows) {
    file_bytes[r["kv_dtype"].get<std::string>() + "/" + r["kv_tier"].get<std::string>()] = r["kv_file_bytes"];
    CHECK(r["kv_bytes_loaded"] == rows[0]["kv_bytes_loaded"]);  // the same f16 KV reaches the fusor
  }
  REQUIRE(file_bytes.size() == 4);
  // kv_dim 32 (2 KV heads of 16): f16 128 bytes per token and layer; q4 32 bytes of codes plus one
  // V group's and 1/32 of K's 32 groups' (scale, min) pairs, 4 + 4 bytes.
  CHECK(j["stores"][0]["kv_bytes_per_token"] == 3 * 128.0);
  CHECK(j["stores"][1]["kv_bytes_per_token"] == 3 * (32 + 4 + 4.0));
  // The prefix (long here: the bench's instruction) is f16 in both stores; the chunks are not.
  CHECK(file_bytes["q4/host"] < file_bytes["f16/host"] * 0.8);
  CHECK(file_bytes["q4/page-cache"] == file_bytes["q4/host"]);
}

TEST_CASE("bench reuse: with the loading controller every cached row says what it decided, and the profile is kept") {
  test::TempDir dir("bench-reuse-control");
  ReuseBenchOptions o = small_bench(dir, 2, 40);
  RandomModelSpec s;  // the machine profile's grid prefills 1,024 + 512 tokens
  s.n_layer = 3;
  s.n_ctx = 2048;
  write_random_model(s, o.model_path);
  o.modes = {ModeSpec(ReuseMode::full), ModeSpec(ReuseMode::reuse), ModeSpec(ReuseMode::blend)};
  o.tiers = {KvStart::disk, KvStart::device};
  o.load_control = true;
  o.cost_profile = (dir.path / "profile.json").string();
  o.store_dir = (dir.path / "store").string();
  const nlohmann::json j = bench_reuse(*make_cpu_backend(1), o);
  CHECK(j["load_control"] == true);
  const auto& rows = j["results"];
  REQUIRE(rows.size() == 1 + 2 * 2);
  for (const auto& r : rows) {
    CAPTURE(r.dump());
    if (r["mode"] == "full") {
      CHECK_FALSE(r.contains("load_control"));
      continue;
    }
    REQUIRE(r.contains("load_control"));
    const auto& lc = r["load_control"];
    CHECK(lc["segments"].get<size_t>() >= 2);  // the chunks (and the instruction prefix)
    CHECK(lc["recomputed_segments"].get<size_t>() <= lc["segments"].get<size_t>());
    CHECK(lc["preload_depth"].get<int>() >= 1);
  }
  CHECK(fs::exists(dir.path / "profile.json"));  // measured once, kept for the next run

  o.load_control = false;
  const nlohmann::json off = bench_reuse(*make_cpu_backend(1), o);
  CHECK(off["load_control"] == false);
  for (const auto& r : off["results"]) CHECK_FALSE(r.contains("load_control"));
}
