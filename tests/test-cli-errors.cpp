// Errors that say where: a query that cannot be answered (its prompt overflows the model's context)
// names its file, line and id whether the run fails or skips it; a run in which every query was
// skipped exits non-zero with a one-line summary; an index built with another model's tokenizer is
// named in a warning; a store.json that is a directory is named.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"
#include "core/util/file-io.h"

namespace {

namespace fs = std::filesystem;
using ragkv::test::run_ragkv;
using ragkv::test::TempDir;

constexpr auto q = &ragkv::test::shell_quote;

}  // namespace

TEST_CASE("cli errors: an unanswerable query names file, line and id, skipped or not, and all skipped exits 1" * doctest::test_suite("real-model")) {
  TempDir t("cli-errors");
  const fs::path index = t.path / "index";
  auto r = run_ragkv("build-index --threads 2 --corpus " + q(ragkv::test::testdata("rag-mini.corpus.jsonl")) +
                     " --out " + q(index));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  nlohmann::json first = nlohmann::json::parse(ragkv::read_file(ragkv::test::testdata("rag-mini.queries.jsonl"))
                                                   .substr(0, ragkv::read_file(ragkv::test::testdata("rag-mini.queries.jsonl")).find('\n')));
  nlohmann::json huge = first;
  huge["id"] = "huge-1";
  std::string words;
  for (int i = 0; i < 9000; ++i) words += "word ";
  huge["question"] = words;  // ~9,000 tokens: past SmolLM2's 8,192 with the passages
  const fs::path two = t.write("two.jsonl", first.dump() + "\n" + huge.dump() + "\n");
  const fs::path one = t.write("one.jsonl", huge.dump() + "\n");
  const std::string flags = " --threads 2 --index " + q(index) + " --max-tokens 2 --mode full";

  r = run_ragkv("answer " + q(two) + flags);
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find("ragkv: error: " + two.string() + ":2: query huge-1: the prompt (") != std::string::npos, r.err);

  r = run_ragkv("answer " + q(two) + flags + " --on-error skip");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("ragkv: skipped " + two.string() + ":2: query huge-1: ") != std::string::npos);

  r = run_ragkv("answer " + q(one) + flags + " --on-error skip");
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK_MESSAGE(r.err.find("ragkv: error: " + one.string() + ": every query was skipped (1 of 1, and 0 bad lines)") !=
                    std::string::npos,
                r.err);

  // Another model's tokenizer: a warning naming the index and both fingerprints (the first,
  // short query only).
  r = run_ragkv("answer " + q(two) + " --threads 2 --index " + q(index) + " --max-tokens 1 --mode full --limit 1 --model " +
                q(ragkv::test::gemma_path()));
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("ragkv: warning: " + index.string() + ": built with tokenizer gpt2/smollm/49152/") != std::string::npos);
  CHECK(r.err.find("this model's is llama/") != std::string::npos);
}

TEST_CASE("cli errors: a store.json that is a directory is named") {
  TempDir t("cli-errors-store");
  fs::create_directories(t.path / "store" / "store.json");
  const auto r = run_ragkv("store stats --store " + q(t.path / "store"));
  CHECK(r.exit_code == 1);
  CHECK(r.err == "ragkv: error: " + (t.path / "store" / "store.json").string() + ": cannot open for reading: a directory, not a regular file\n");
}
