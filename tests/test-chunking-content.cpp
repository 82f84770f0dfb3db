// Content-defined chunking (retrieval/chunker.h, `build-index --chunking content`): on a document of
// the rag-mini passages joined as paragraphs, a sentence inserted near the top changes only the
// chunks around it — every later chunk keeps its text and its id (so its cache key) — where fixed
// windows change every chunk after the edit; chunks stay within the window, cover the text in
// order, and carry unique ids named by their text; `store gc --keep-index` keeps only the
// caches of chunks the named indexes hold; and after `build-index --update` an edited chunk is
// built from its earlier version's cache (a donor cache, core/rag/donor-reuse.h) that `reuse` names
// and `prefix` never uses.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "retrieval/chunker.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

using ragkv::Chunking;
using ragkv::ChunkParams;

ragkv::Document joined_rag_mini() {
  std::string text;
  for (const nlohmann::json& d : ragkv::test::read_jsonl(ragkv::test::testdata("rag-mini.corpus.jsonl")))
    text += (text.empty() ? "" : "\n\n") + d["text"].get<std::string>();
  return ragkv::Document{"joined", "rag-mini", text, "joined.txt", 0};
}

// Chunks of `after` whose id and text are both those of a chunk of `before`.
size_t unchanged(const std::vector<ragkv::Chunk>& before, const std::vector<ragkv::Chunk>& after) {
  std::map<std::string, std::string> old;
  for (const auto& c : before) old[c.id] = c.text;
  size_t n = 0;
  for (const auto& c : after) n += old.count(c.id) && old[c.id] == c.text;
  return n;
}

}  // namespace

TEST_CASE("chunking: content-defined cuts survive an inserted sentence, fixed windows do not") {
  const auto& tok = ragkv::test::smollm_tokenizer();
  const ragkv::Document doc = joined_rag_mini();
  ragkv::Document edited = doc;
  const size_t first_stop = edited.text.find(". ") + 2;  // after the first sentence
  edited.text.insert(first_stop, "This sentence was added in the new version of the page. ");
  ChunkParams content{48, 0, 0.2, Chunking::content}, fixed{48, 0, 0.2, Chunking::fixed};

  const auto c0 = ragkv::chunk_document(doc, tok, content), c1 = ragkv::chunk_document(edited, tok, content);
  const auto f0 = ragkv::chunk_document(doc, tok, fixed), f1 = ragkv::chunk_document(edited, tok, fixed);
  REQUIRE(c0.size() >= 12);
  const size_t kept_content = unchanged(c0, c1), kept_fixed = unchanged(f0, f1);
  MESSAGE("of " << c1.size() << " content chunks " << kept_content << " unchanged; of " << f1.size() << " fixed chunks "
                << kept_fixed);
  CHECK(kept_content + 3 >= c1.size());  // the edited chunk, and at most two around it, change
  CHECK(kept_fixed < kept_content);

  for (const auto* chunks : {&c0, &c1}) {
    std::set<std::string> ids;
    size_t at = 0;
    for (const auto& c : *chunks) {
      CHECK(c.n_tokens <= 48);
      CHECK(ids.insert(c.id).second);
      CHECK(c.id.starts_with("joined#"));
      CHECK(c.id.size() == std::string("joined#").size() + 16);
      CHECK(c.offset >= at);  // in order, not overlapping
      at = c.offset + c.text.size();
    }
  }
  CHECK(ragkv::chunk_document(doc, tok, content).size() == c0.size());  // deterministic
  CHECK(ragkv::parse_chunking("content") == Chunking::content);
  CHECK_THROWS_WITH_AS(ragkv::parse_chunking("rolling"), doctest::Contains("expected fixed or content"), ragkv::Error);
}

TEST_CASE("chunking: a text repeated within a document gets ids .2, .3, … in order") {
  const auto& tok = ragkv::test::smollm_tokenizer();
  std::string para = "The same paragraph stands here, word for word, as a boilerplate notice that pages repeat.";
  std::string text;
  for (int i = 0; i < 4; ++i) text += para + "\n\n";
  const ragkv::Document doc{"rep", "", text, "rep.txt", 0};
  const auto chunks = ragkv::chunk_document(doc, tok, ChunkParams{24, 0, 0.2, Chunking::content});
  REQUIRE(chunks.size() >= 2);
  std::set<std::string> ids;
  for (const auto& c : chunks) CHECK(ids.insert(c.id).second);
  CHECK(chunks[1].id == chunks[0].id + ".2");
}

TEST_CASE("chunking: store gc --keep-index removes the caches of chunks no named index holds") {
  const ragkv::test::TempDir tmp("gc-keep-index");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);
  constexpr auto q = &ragkv::test::shell_quote;
  // A later version of the corpus without its first document.
  const auto docs = ragkv::test::read_jsonl(ragkv::test::testdata("rag-mini.corpus.jsonl"));
  std::string v2;
  for (size_t i = 1; i < docs.size(); ++i) v2 += docs[i].dump() + "\n";
  const auto v2_corpus = tmp.write("v2.jsonl", v2);
  ragkv::test::Run r = ragkv::test::run_ragkv("build-index --corpus " + q(v2_corpus) + " --chunk-tokens 256 --out " +
                                              q(tmp.path / "index-v2") + " --model " + q(tiny.model));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string gc = "store gc --store " + q(tiny.store) + " --model " + q(tiny.model);
  auto files = [&] {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(tiny.store / "kv")) out.insert(e.path().filename().string());
    return out;
  };
  const auto before = files();
  // Both versions named: nothing goes.
  r = ragkv::test::run_ragkv(gc + " --keep-index " + q(tiny.index) + " " + q(tmp.path / "index-v2"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(files() == before);
  // The new version only: the first document's chunks' caches (canonical, variants, as named by
  // their stem) go; every other file, the prefix among them, stays.
  r = ragkv::test::run_ragkv(gc + " --keep-index " + q(tmp.path / "index-v2"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const nlohmann::json s = nlohmann::json::parse(r.out);
  const auto after = files();
  CHECK(s["removed_unused"].get<size_t>() == before.size() - after.size());
  CHECK(after.size() < before.size());
  CHECK(after.size() > 1);
  // Nothing v2 uses was removed: a precompute of v2 into the store computes no chunk.
  r = ragkv::test::run_ragkv("precompute --index " + q(tmp.path / "index-v2") + " --store " + q(tiny.store) +
                             " --neighbours 0" + tiny.on_model);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(nlohmann::json::parse(r.out)["computed"] == 0);
  // Neither a budget nor an index: refused.
  r = ragkv::test::run_ragkv("store gc --store " + q(tiny.store));
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("give --max-bytes, --keep-index") != std::string::npos);
}

TEST_CASE("chunking: after build-index --update, precompute builds an edited chunk from its earlier version's cache") {
  const ragkv::test::TempDir tmp("donor-cli");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 0);
  constexpr auto q = &ragkv::test::shell_quote;
  // Version 2: a sentence inserted in the middle of the first passage.
  auto docs = ragkv::test::read_jsonl(ragkv::test::testdata("rag-mini.corpus.jsonl"));
  std::string text = docs[0]["text"];
  text.insert(text.find(". ", text.size() / 3) + 2, "This sentence is new in the second version. ");
  docs[0]["text"] = text;
  std::string v2;
  for (const auto& d : docs) v2 += d.dump() + "\n";
  const auto v2_corpus = tmp.write("v2.jsonl", v2);
  ragkv::test::Run r = ragkv::test::run_ragkv("build-index --corpus " + q(v2_corpus) + " --out " + q(tiny.index) +
                                              " --update --model " + q(tiny.model));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const char* copy : {"store-off", "store-unrepaired"})
    std::filesystem::copy(tiny.store, tmp.path / copy, std::filesystem::copy_options::recursive);

  const std::string pre = "precompute --index " + q(tiny.index) + " --neighbours 0" + tiny.on_model + " --store ";
  auto precompute = [&](const std::string& args) {
    const ragkv::test::Run run = ragkv::test::run_ragkv(pre + args);
    REQUIRE_MESSAGE(run.exit_code == 0, run.err);
    return nlohmann::json::parse(run.out);
  };
  const nlohmann::json off = precompute(q(tmp.path / "store-off") + " --donor-reuse off");
  CHECK(off["computed"] == 1);  // the edited chunk
  CHECK(off["from_donor"] == 0);
  const nlohmann::json on = precompute(q(tiny.store));
  CHECK(on["computed"] == 1);
  CHECK(on["from_donor"] == 1);
  CHECK(on["donor_shared_tokens"].get<int64_t>() > on["tokens"].get<int64_t>() / 2);
  CHECK(on["donor_repaired_tokens"].get<int64_t>() > 0);
  CHECK(on["token_layers"].get<int64_t>() < off["token_layers"].get<int64_t>());  // (2 layers: blend's check layer is most of them)
  CHECK(on["donors"]["previous_chunks"].get<size_t>() > 0);
  // Unrepaired: only the changed tokens computed.
  const nlohmann::json bare = precompute(q(tmp.path / "store-unrepaired") + " --donor-repair 0");
  CHECK(bare["from_donor"] == 1);
  CHECK(bare["donor_repaired_tokens"] == 0);
  CHECK(bare["token_layers"].get<int64_t>() < off["token_layers"].get<int64_t>() / 2);
  size_t donor_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(tiny.store / "kv"))
    donor_files += e.path().filename().string().ends_with(".donor.rkv");
  CHECK(donor_files == 1);
  // Again: stored already.
  CHECK(precompute(q(tiny.store))["computed"] == 0);
  // The store verifies, and gc keeps the donor cache of a chunk the index holds.
  r = ragkv::test::run_ragkv("store verify --store " + q(tiny.store));
  CHECK_MESSAGE(r.exit_code == 0, r.out, r.err);
  r = ragkv::test::run_ragkv("store gc --store " + q(tiny.store) + " --keep-index " + q(tiny.index) + " --model " +
                             q(tiny.model));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);

  // reuse takes it and says so; prefix and --require exact never do.
  const std::string id = docs[0]["id"];
  const auto queries = tmp.write("q.jsonl", R"({"id": "a", "question": "What is new?", "passages": [")" + id + R"("]})" "\n");
  const std::string answer = "answer " + q(queries) + " --index " + q(tiny.index) + " --store " + q(tiny.store) +
                             " --max-tokens 2" + tiny.on_model + " --mode ";
  auto donors_used = [&](const std::string& mode) {
    const ragkv::test::Run run = ragkv::test::run_ragkv(answer + mode);
    REQUIRE_MESSAGE(run.exit_code == 0, run.err);
    std::vector<std::string> out;
    const nlohmann::json rec = nlohmann::json::parse(run.out);
    for (const nlohmann::json& p : rec["metrics"]["provenance"])
      if (p["source"] == "donor") out.push_back(p["donor"]);
    return out;
  };
  const std::vector<std::string> used = donors_used("reuse");
  REQUIRE(used.size() == 1);
  CHECK(used[0].starts_with(id + "#"));  // the same document's earlier chunk
  CHECK(donors_used("prefix").empty());
  CHECK(donors_used("reuse --require exact").empty());
}
