// The ragkv executable end to end: generate/tokenize on the default model, and bad input
// answered with one line on stderr and a non-zero exit, never a crash.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/format/gguf.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace fs = std::filesystem;

namespace {

using ragkv::test::Run;

Run run(const std::string& args) { return ragkv::test::run_ragkv(args); }

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("cli: generate answers a chat prompt on the default model") {
  const Run r = run("generate --device cpu --chat --max-tokens 12 --json --prompt 'What is the capital of France?'");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("Paris") != std::string::npos);
}

TEST_CASE("cli: tokenize prints ids on one line") {
  const Run r = run("tokenize --text 'Hello world'");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "19556 905\n");
}

TEST_CASE("cli: make-test-model writes quantised weights, a padded vocabulary and a separate head, and generate runs it") {
  const ragkv::test::TempDir tmp("cli-quantised");
  const std::string path = (tmp.path / "q4km.gguf").string();
  const Run made = run("make-test-model --arch llama --layers 2 --embd 256 --heads 4 --kv-heads 2 --ff 512 --context 64 "
                       "--vocab 1000 --separate-output --weight-type q4_k_m --threads 2 --out " + path);
  CAPTURE(made.err);
  REQUIRE(made.exit_code == 0);
  CHECK(made.err.find("M weights") != std::string::npos);  // progress
  {
    ragkv::GgufFile g(path);
    CHECK(g.tensor("token_embd.weight").ne == std::vector<int64_t>{256, 1000});
    CHECK(g.tensor("token_embd.weight").type == ragkv::GgmlType::Q4_K);
    CHECK(g.tensor("output.weight").type == ragkv::GgmlType::Q6_K);
    CHECK(g.tensor("blk.1.attn_q.weight").type == ragkv::GgmlType::Q4_K);
    CHECK(g.tensor("blk.1.ffn_norm.weight").type == ragkv::GgmlType::F32);
  }
  const Run a = run("generate --device cpu --threads 2 --json --max-tokens 5 --prompt 'the cat' --model " + path);
  const Run b = run("generate --device cpu --threads 2 --json --max-tokens 5 --prompt 'the cat' --model " + path);
  CAPTURE(a.err);
  CHECK(a.exit_code == 0);
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  CHECK(ja["output_ids"].size() == 5);
  CHECK(ja["output_ids"] == jb["output_ids"]);
  CHECK(ja["text"] == jb["text"]);
  const Run bad = run("make-test-model --weight-type q4_k --out " + (tmp.path / "bad.gguf").string());
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("token_embd.weight has rows of 64 values") != std::string::npos);
}

TEST_CASE("cli: bad input gives a one-line error and a non-zero exit") {
  const ragkv::test::TempDir tmp("cli-bad-input");
  const fs::path& dir = tmp.path;
  const std::string trunc = (dir / "cli-truncated.gguf").string();
  {
    std::vector<char> head(1 << 20);
    std::ifstream(ragkv::test::smollm_path(), std::ios::binary).read(head.data(), std::streamsize(head.size()));
    std::ofstream(trunc, std::ios::binary).write(head.data(), std::streamsize(head.size()));
  }
  const std::string tiny = (dir / "cli-tiny.gguf").string();
  REQUIRE(run("make-test-model --arch llama --layers 1 --embd 32 --heads 2 --kv-heads 1 --ff 64 --context 32 --out " + tiny).exit_code == 0);

  struct Case { std::string args, expect; int code; };
  const std::vector<Case> cases = {
      {"generate --device cpu --model /nonexistent.gguf --prompt hi", "cannot open model file", 1},
      {"generate --device cpu --model " + trunc + " --prompt hi", "truncated", 1},
      {"generate --device cpu --model " + ragkv::test::testdata("quant_golden.bin").string() + " --prompt hi", "not a GGUF file", 1},
      {"generate --device cpu --model " + tiny + " --max-tokens 4 --prompt '" + std::string(40, 'a') + "'",
       "exceeds the model's context of 32 tokens", 1},
      {"generate --prompt", "", 2},
      {"frobnicate", "", 2},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const Run r = run(c.args);
    CAPTURE(r.err);
    CHECK(r.exit_code == c.code);
    if (c.code == 1) {
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.rfind("ragkv: error: ", 0) == 0);
      CHECK(r.err.find(c.expect) != std::string::npos);
    }
  }
}

TEST_CASE("cli: build-index and search on a small corpus, bad corpus lines named by file and line") {
  const ragkv::test::TempDir tmp("cli-index");
  const fs::path& dir = tmp.path;
  const std::string corpus = (dir / "corpus.jsonl").string();
  {
    std::ofstream c(corpus);
    c << R"({"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."})" << "\n"
      << R"({"id": "nile", "title": "Nile", "text": "The Nile is a major north-flowing river in northeastern Africa."})" << "\n"
      << R"({"id": "bach", "title": "Bach", "text": "Johann Sebastian Bach was a German composer of the Baroque period."})" << "\n";
  }
  const std::string index = (dir / "index").string();
  const Run b = run("build-index --device cpu --corpus " + corpus + " --out " + index);
  CAPTURE(b.err);
  REQUIRE(b.exit_code == 0);
  CHECK(b.out.find("\"chunks\":3") != std::string::npos);
  CHECK(fs::exists(fs::path(index) / "manifest.json"));

  const Run s = run("search --device cpu --index " + index + " --query 'Which river flows north through Africa?' -k 2");
  CHECK(s.exit_code == 0);
  CHECK(count_lines(s.out) == 2);
  CHECK(s.out.rfind(R"({"doc":"nile")", 0) == 0);
  const Run e = run("search --device cpu --exact --index " + index + " --query 'Which river flows north through Africa?' -k 2");
  // Same hits in the same order (HNSW scores are 1 − distance, so the last digits may differ).
  const auto ids = [](const std::string& out) {
    std::vector<std::string> v;
    for (size_t p = out.find("\"id\":\""); p != std::string::npos; p = out.find("\"id\":\"", p + 1))
      v.push_back(out.substr(p, out.find('"', p + 6) - p));
    return v;
  };
  CHECK(ids(e.out) == ids(s.out));

  {
    std::ofstream c(corpus, std::ios::app);
    c << "{not json\n";
  }
  const Run bad = run("build-index --device cpu --corpus " + corpus + " --out " + (dir / "bad").string());
  CHECK(bad.exit_code == 1);
  CHECK(count_lines(bad.err) == 1);
  CHECK(bad.err.find("corpus.jsonl:4") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "bad" / "manifest.json"));
  const Run skip = run("build-index --device cpu --on-error skip --corpus " + corpus + " --out " + (dir / "skip").string());
  CHECK(skip.exit_code == 0);
  CHECK(skip.out.find(R"("skipped":{"bad-json":1})") != std::string::npos);
}

TEST_CASE("cli: --help shows the daily options, --help-all the advanced ones too") {
  // An option line of CLI11's help starts with two spaces and a dash (QUERIES, the positional, too).
  auto options = [](const std::string& help) {
    int n = 0;
    for (size_t at = 0; (at = help.find("\n  ", at)) != std::string::npos; ++at) {
      const char c = help[at + 3];
      n += c == '-' || (c >= 'A' && c <= 'Z' && help.compare(at + 3, 7, "QUERIES") == 0);
    }
    return n;
  };
  const Run help = run("answer --help");
  REQUIRE(help.exit_code == 0);
  CHECK(options(help.out) <= 20);
  CHECK(help.out.find("--recompute-ratio") != std::string::npos);
  CHECK(help.out.find("--pipeline") == std::string::npos);
  const Run all = run("answer --help-all");
  REQUIRE(all.exit_code == 0);
  CHECK(all.out.find("--pipeline") != std::string::npos);
  CHECK(all.out.find("Advanced") != std::string::npos);
  CHECK(options(all.out) > options(help.out) + 10);
  // The mode grammar says what --select, --adaptive, --alpha and --chunk-order said.
  for (const char* gone : {"--select", "--adaptive", "--alpha", "--chunk-order"}) CHECK(all.out.find(gone) == std::string::npos);
}
