// QUERIES.jsonl reading: every field, integer ids, each kind of bad line under fail (FILE:LINE
// message) and skip (counted, good lines kept in order), empty and missing files, and the
// shared QA sets.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "core/rag/queries.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using ragkv::OnError;
using ragkv::QueryFile;
using ragkv::test::TempDir;

using ragkv::test::error_of;

using Strings = std::vector<std::string>;

}  // namespace

TEST_CASE("queries: every field, integer ids, blank lines, BOM and CRLF") {
  TempDir t("queries");
  const fs::path f =
      t.write("q.jsonl",
              "\xEF\xBB\xBF{\"id\": \"q1\", \"question\": \"Who won?\", \"answers\": [\"Denver\", \"the Broncos\"], "
              "\"passages\": [\"d2\", \"d1\"], \"gold_passages\": [\"d1\"], \"conversation\": \"c7\", \"turn\": 2}\n"
              "\n"
              "  \t\n"
              "{\"id\": 42, \"question\": \"Caf\xC3\xA9?\", \"answers\": null, \"extra\": {\"x\": 1}}\r\n"
              "{\"question\": \"Where?\", \"id\": \"q3\", \"answers\": []}");  // no final newline
  const QueryFile qf = ragkv::load_queries(f, OnError::fail);
  REQUIRE(qf.queries.size() == 3);
  CHECK(qf.skipped.empty());
  const ragkv::Query& a = qf.queries[0];
  CHECK(a.id == "q1");
  CHECK(a.question == "Who won?");
  CHECK(a.answers == Strings{"Denver", "the Broncos"});
  CHECK(a.passages == Strings{"d2", "d1"});
  CHECK(a.gold_passages == Strings{"d1"});
  CHECK(a.conversation == "c7");
  CHECK(a.turn == 2);
  CHECK(a.source == f.string());
  CHECK(a.line == 1);
  const ragkv::Query& b = qf.queries[1];
  CHECK(b.id == "42");
  CHECK(b.question == "Caf\xC3\xA9?");
  CHECK(b.answers.empty());
  CHECK(b.passages.empty());
  CHECK(b.conversation == "");
  CHECK(b.turn == 0);
  CHECK(b.line == 4);
  CHECK(qf.queries[2].id == "q3");
  CHECK(qf.queries[2].line == 5);
}

TEST_CASE("queries: bad lines fail naming file and line, or are skipped and counted") {
  struct Bad {
    std::string line, kind, says;
  };
  const std::vector<Bad> bad = {
      {"{\"id\": \"x\", \"question\": ", "bad-json", "not valid JSON"},
      {"[\"id\", \"question\"]", "bad-json", "expected a JSON object"},
      {"{\"id\": \"x\", \"question\": \"caf\xE9?\"}", "invalid-utf8", "invalid UTF-8 (byte 0xe9 at column 29)"},
      {"{\"question\": \"Why?\"}", "missing-field", "missing field \"id\""},
      {"{\"id\": \"\", \"question\": \"Why?\"}", "missing-field", "field \"id\" must be"},
      {"{\"id\": 1.5, \"question\": \"Why?\"}", "missing-field", "field \"id\" must be"},
      {"{\"id\": \"x\"}", "missing-field", "missing field \"question\""},
      {"{\"id\": \"x\", \"question\": 3}", "missing-field", "field \"question\" must be a non-empty string"},
      {"{\"id\": \"x\", \"question\": \"  \"}", "missing-field", "field \"question\" must be a non-empty string"},
      {"{\"id\": \"x\", \"question\": \"Why?\", \"answers\": \"yes\"}", "missing-field",
       "field \"answers\" is not an array of strings"},
      {"{\"id\": \"x\", \"question\": \"Why?\", \"passages\": [\"d1\", 2]}", "missing-field",
       "field \"passages\" is not an array of strings"},
      {"{\"id\": \"x\", \"question\": \"Why?\", \"gold_passages\": {}}", "missing-field",
       "field \"gold_passages\" is not an array of strings"},
      {"{\"id\": \"x\", \"question\": \"Why?\", \"turn\": \"2\"}", "missing-field", "field \"turn\""},
      {"{\"id\": \"x\", \"question\": \"Why?\", \"conversation\": []}", "missing-field", "field \"conversation\""},
      {"{\"id\": \"good\", \"question\": \"Again?\"}", "duplicate-id", "duplicate query id \"good\" (first at line 1)"},
  };
  TempDir t("badqueries");
  const std::string good = "{\"id\": \"good\", \"question\": \"Why?\"}\n";
  const std::string good2 = "{\"id\": \"good2\", \"question\": \"Why not?\"}\n";
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("bad line: " << bad[i].line);
    // The bad line is line 3, after a good line and a blank one.
    const fs::path f = t.write(fmt::format("bad{}.jsonl", i), good + "\n" + bad[i].line + "\n" + good2);
    const std::string err = error_of([&] { ragkv::load_queries(f, OnError::fail); });
    CHECK(err.starts_with(f.string() + ":3: " + bad[i].says));
    const QueryFile qf = ragkv::load_queries(f, OnError::skip);
    REQUIRE(qf.skipped.size() == 1);
    CHECK(qf.skipped[0].line == 3);
    CHECK(qf.skipped[0].source == f.string());
    CHECK(qf.skipped[0].message == err);
    CHECK(ragkv::input_problem_name(qf.skipped[0].kind) == bad[i].kind);
    REQUIRE(qf.queries.size() == 2);
    CHECK(qf.queries[0].id == "good");
    CHECK(qf.queries[1].id == "good2");
    CHECK(qf.queries[1].line == 4);
  }

  // All in one file: good lines are kept in order, the rest counted per kind.
  std::string all;
  for (size_t i = 0; i < bad.size(); ++i)
    all += fmt::format("{{\"id\": {}, \"question\": \"Q{}?\"}}\n", i, i) + bad[i].line + "\n";
  all = good + all;
  const QueryFile qf = ragkv::load_queries(t.write("all.jsonl", all), OnError::skip);
  REQUIRE(qf.queries.size() == bad.size() + 1);
  for (size_t i = 0; i < bad.size(); ++i) {
    CHECK(qf.queries[i + 1].id == std::to_string(i));
    CHECK(qf.queries[i + 1].line == 2 * i + 2);
  }
  CHECK(qf.skipped.size() == bad.size());
  const std::map<std::string, size_t> want = {
      {"bad-json", 2}, {"invalid-utf8", 1}, {"missing-field", 11}, {"duplicate-id", 1}};
  CHECK(qf.skipped_by_kind() == want);
}

TEST_CASE("queries: empty, all-bad and missing files are errors under either policy") {
  TempDir t("emptyqueries");
  const fs::path empty = t.write("empty.jsonl", "");
  const fs::path blank = t.write("blank.jsonl", "\n  \n");
  const fs::path all_bad = t.write("bad.jsonl", "nope\n{\"id\": 1}\n");
  for (OnError policy : {OnError::fail, OnError::skip}) {
    CHECK(error_of([&] { ragkv::load_queries(empty, policy); }) == empty.string() + ": no queries");
    CHECK(error_of([&] { ragkv::load_queries(blank, policy); }) == blank.string() + ": no queries");
    CHECK(error_of([&] { ragkv::load_queries(t.path / "none.jsonl", policy); }) ==
          "queries file does not exist: " + (t.path / "none.jsonl").string());
    CHECK(error_of([&] { ragkv::load_queries(t.path, policy); }).starts_with(t.path.string() + ": is a directory"));
  }
  CHECK(error_of([&] { ragkv::load_queries(all_bad, OnError::fail); }).starts_with(all_bad.string() + ":1: "));
  CHECK(error_of([&] { ragkv::load_queries(all_bad, OnError::skip); }) ==
        all_bad.string() + ": no queries (skipped: 1 bad-json, 1 missing-field)");
}

TEST_CASE("queries: the shared QA sets load cleanly") {
  const fs::path data = ragkv::test::source_dir().parent_path() / "shared" / "data";
  const fs::path squad = data / "squad-dev.queries.jsonl", musique = data / "musique-cacheblend.queries.jsonl";
  if (!fs::exists(squad) || !fs::exists(musique)) {
    MESSAGE("skipped: " << data << " has no squad-dev/musique-cacheblend queries");
    return;
  }
  const QueryFile s = ragkv::load_queries(squad, OnError::fail);
  CHECK(s.queries.size() == 8839);
  CHECK(s.skipped.empty());
  CHECK(s.queries[0].id == "56be4db0acb8001400a502ec");
  CHECK(s.queries[0].answers == Strings{"Denver Broncos"});
  CHECK(s.queries[0].gold_passages == Strings{"Super_Bowl_50#0"});
  size_t odd = 0;  // queries without answers, without exactly one gold passage, or with fixed passages
  for (const auto& q : s.queries) odd += q.answers.empty() || q.gold_passages.size() != 1 || !q.passages.empty();
  CHECK(odd == 0);

  const QueryFile m = ragkv::load_queries(musique, OnError::fail);
  CHECK(m.queries.size() == 150);
  CHECK(m.queries[0].id == "musique-q000");
  CHECK(m.queries[0].passages.front() == "musique-p00000");
  odd = 0;  // queries without answers or without exactly 10 passages
  for (const auto& q : m.queries) odd += q.answers.empty() || q.passages.size() != 10;
  CHECK(odd == 0);
}
