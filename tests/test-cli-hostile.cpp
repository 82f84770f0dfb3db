// A hostile store, end to end on a tiny random model: for each fault class a user or another
// process can plant (a FIFO, a link out of the store, a directory at a cache's name, kv/ as a file,
// a store that refuses writes, output that cannot be written) the run either finishes with the
// answers a clean run gives — `prefix` answers are full's whatever the store holds — or stops with
// one line naming the path. Fault injection: labelled check (make check).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using ragkv::test::Run;
using ragkv::test::run_ragkv;

namespace {

constexpr auto q = &ragkv::test::shell_quote;

std::string answers_of(const fs::path& p) {
  std::string out;
  std::ifstream f(p);
  for (std::string line; std::getline(f, line);) out += json::parse(line)["answer"].get<std::string>() + "\n";
  return out;
}

std::set<std::string> kv_files(const fs::path& store) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(store / "kv")) out.insert(e.path().filename().string());
  return out;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Removes the store's variants (kv/<16 hex>.<16 hex>.rkv), so that the next run computes them.
void remove_variants(const fs::path& store) {
  for (const std::string& n : kv_files(store))
    if (n.size() == 16 + 1 + 16 + 4 && n.ends_with(".rkv")) fs::remove(store / "kv" / n);
}

// The last non-empty line of stderr.
std::string last_line(const std::string& err) {
  std::string last;
  size_t start = 0;
  while (start < err.size()) {
    const size_t end = std::min(err.find('\n', start), err.size());
    if (end > start) last = err.substr(start, end - start);
    start = end + 1;
  }
  return last;
}

struct Fixture {
  ragkv::test::TempDir tmp{"cli-hostile"};
  ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);
  const fs::path &index = tiny.index, &store = tiny.store;
  const std::string& on_model = tiny.on_model;
  std::string queries = q(ragkv::test::testdata("rag-mini.queries.jsonl"));

  // A copy of the clean store, to damage.
  fs::path copy(const std::string& name) const {
    const fs::path d = tmp.path / name;
    fs::copy(store, d, fs::copy_options::recursive);
    return d;
  }
  Run answer(const fs::path& s, const std::string& mode, const fs::path& out, const std::string& extra = "") const {
    return run_ragkv("answer " + queries + " --index " + q(index) + " --store " + q(s) + " --mode " + mode +
                     " --limit 4 --top-k 2 --max-tokens 3" + on_model + " --out " + q(out) + extra);
  }
};

}  // namespace

TEST_CASE("cli hostile store: every fault class finishes with a clean run's answers or stops naming the path" *
          doctest::test_suite("check")) {
  const Fixture f;
  const fs::path clean_out = f.tmp.path / "clean.jsonl";
  Run r = f.answer(f.store, "prefix", clean_out);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string clean = answers_of(clean_out);
  REQUIRE_FALSE(clean.empty());
  auto same_answers = [&](const fs::path& s, const std::string& what) {
    const fs::path out = f.tmp.path / (what + ".jsonl");
    const Run a = f.answer(s, "prefix", out);
    INFO(what << ": " << a.err);
    CHECK(a.exit_code == 0);
    CHECK(answers_of(out) == clean);
    return a;
  };
  const std::string key = [&] {  // a canonical cache: <16 hex>.rkv
    for (const std::string& n : kv_files(f.store))
      if (n.size() == 20) return n;
    return std::string();
  }();
  REQUIRE_FALSE(key.empty());

  SUBCASE("a FIFO at a cache, at verified.log: no reader blocks, the cache is computed again") {
    const fs::path s = f.copy("fifo");
    fs::remove(s / "kv" / key);
    REQUIRE(::mkfifo((s / "kv" / key).c_str(), 0644) == 0);
    fs::remove(s / "verified.log");
    REQUIRE(::mkfifo((s / "verified.log").c_str(), 0644) == 0);
    same_answers(s, "fifo");
    const Run v = run_ragkv("store verify --store " + q(s));
    CHECK(v.exit_code == 1);
    CHECK(v.out.find("a FIFO, not a regular file") != std::string::npos);
    const Run p = run_ragkv("store repair --store " + q(s) + " --index " + q(f.index) + f.on_model);
    CHECK_MESSAGE(p.exit_code == 0, p.err);
    CHECK(fs::is_fifo(s / "set-aside" / key));
    CHECK(fs::is_regular_file(s / "kv" / key));
  }
  SUBCASE("a FIFO at store.json: one line naming it") {
    const fs::path s = f.copy("fifo-json");
    fs::remove(s / "store.json");
    REQUIRE(::mkfifo((s / "store.json").c_str(), 0644) == 0);
    const Run a = f.answer(s, "prefix", f.tmp.path / "fifo-json.jsonl");
    CHECK(a.exit_code == 1);
    CHECK(last_line(a.err) == "ragkv: error: " + (s / "store.json").string() + ": cannot open for reading: a FIFO, not a regular file");
  }
  SUBCASE("links out of the store: never followed") {
    const fs::path s = f.copy("links");
    { std::ofstream(f.tmp.path / "victim") << "victim\n"; }
    fs::remove(s / "verified.log");
    fs::create_symlink(f.tmp.path / "victim", s / "verified.log");
    fs::remove(s / "kv" / key);
    Run p = run_ragkv("precompute --index " + q(f.index) + " --store " + q(s) + " --neighbours 0" + f.on_model);
    CHECK_MESSAGE(p.exit_code == 0, p.err);
    CHECK(read_text(f.tmp.path / "victim") == "victim\n");
    same_answers(s, "links");
    fs::remove(s / "variants.lock");
    fs::create_symlink(f.tmp.path / "outside", s / "variants.lock");
    remove_variants(s);  // (so that precompute computes variants, under the lock)
    p = run_ragkv("precompute --index " + q(f.index) + " --store " + q(s) + " --neighbours 1" + f.on_model);
    CHECK(p.exit_code == 1);
    CHECK(last_line(p.err).find((s / "variants.lock").string() + ": cannot open the lock file: a symbolic link") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(fs::symlink_status(f.tmp.path / "outside")));
  }
  SUBCASE("a directory at a cache's name: repair moves it aside and computes the cache") {
    const fs::path s = f.copy("dir");
    fs::remove(s / "kv" / key);
    fs::create_directories(s / "kv" / key / "inside");
    same_answers(s, "dir");
    const Run p = run_ragkv("store repair --store " + q(s) + " --index " + q(f.index) + f.on_model);
    CHECK_MESSAGE(p.exit_code == 0, p.err);
    CHECK(fs::is_directory(s / "set-aside" / key / "inside"));
    CHECK(fs::is_regular_file(s / "kv" / key));
    CHECK(run_ragkv("store verify --store " + q(s)).exit_code == 0);
  }
  SUBCASE("kv/ a regular file: answers computed in full, with a warning") {
    const fs::path s = f.copy("kv-file");
    fs::remove_all(s / "kv");
    { std::ofstream(s / "kv") << "x"; }
    const Run a = same_answers(s, "kv-file");
    CHECK(a.err.find((s / "kv").string() + " is not a directory") != std::string::npos);
  }
  SUBCASE("a store that refuses the write-back: every answer kept, the failure counted and said once") {
    // The variants a write-back run stores, then directories planted at exactly those names.
    const fs::path probe = f.copy("write-back-probe"), s = f.copy("write-back");
    // Write-back stores the chunks a prompt computes: without variants and every other canonical cache.
    for (const fs::path& d : {probe, s}) {
      remove_variants(d);
      size_t i = 0;
      for (const std::string& n : kv_files(d))
        if (i++ % 2 == 1) fs::remove(d / "kv" / n);
    }
    Run a = f.answer(probe, "blend", f.tmp.path / "probe.jsonl", " --write-back");
    REQUIRE_MESSAGE(a.exit_code == 0, a.err);
    size_t planted = 0;
    const std::set<std::string> before = kv_files(s);
    for (const std::string& n : kv_files(probe))
      if (!before.count(n) && n.ends_with(".rkv")) planted += fs::create_directory(s / "kv" / n);
    REQUIRE(planted > 0);
    const fs::path out = f.tmp.path / "write-back.jsonl";
    a = f.answer(s, "blend", out, " --write-back");
    CHECK_MESSAGE(a.exit_code == 0, a.err);
    std::ifstream lines(out);
    size_t n = 0;
    for (std::string line; std::getline(lines, line);) ++n;
    CHECK(n == 4);
    CHECK(a.err.find("--write-back: a variant could not be stored") != std::string::npos);
    const size_t summary = a.err.find("answer summary: ");
    REQUIRE(summary != std::string::npos);
    const json sj = json::parse(a.err.substr(summary + 16, a.err.find('\n', summary) - summary - 16));
    CHECK(sj["variant_write_failures"].get<double>() >= 1);
  }
  SUBCASE("output that cannot be written: the reason is named; a stopped run leaves no empty partial file") {
    Run a = run_ragkv("answer " + f.queries + " --index " + q(f.index) + " --store " + q(f.store) +
                      " --limit 1 --max-tokens 2" + f.on_model + " > /dev/full");
    CHECK(a.exit_code == 1);
    CHECK(last_line(a.err) == "ragkv: error: stdout: write failed: No space left on device");
    const fs::path bad = f.tmp.path / "bad-passage.jsonl", out = f.tmp.path / "stopped.jsonl";
    { std::ofstream(bad) << "{\"id\":\"a\",\"question\":\"who?\",\"passages\":[\"Nope#0\"]}\n"; }
    a = run_ragkv("answer " + q(bad) + " --index " + q(f.index) + " --store " + q(f.store) + f.on_model + " --out " + q(out));
    CHECK(a.exit_code == 1);
    CHECK_FALSE(fs::exists(out.string() + ".partial"));
  }
  SUBCASE("eval of one query writes its report") {
    const fs::path report = f.tmp.path / "one.md";
    const Run e = run_ragkv("eval " + f.queries + " --index " + q(f.index) + " --store " + q(f.store) +
                            " --limit 1 --max-tokens 2" + f.on_model + " --report " + q(report));
    CHECK_MESSAGE((e.exit_code == 0 || e.exit_code == 1), e.err);  // 1: the gate, which a random model may fail
    CHECK(fs::file_size(report) > 0);
  }
}
