// Retrieval input side: corpus loading (files, directories, JSONL; every kind of bad input under
// fail and skip), the UTF-8 validator, and the chunker (windows, snapping, UTF-8-safe cuts,
// overlap, stable ids) with the SmolLM2 tokenizer.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/util/error.h"
#include "core/format/gguf.h"
#include "core/model/tokenizer.h"
#include "retrieval/chunker.h"
#include "retrieval/corpus.h"
#include "core/util/utf8.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using ragkv::Chunk;
using ragkv::ChunkParams;
using ragkv::Document;
using ragkv::OnError;

using ragkv::test::TempDir;

using ragkv::test::smollm_tokenizer;

using ragkv::test::error_of;

// Every chunk is a verbatim, whitespace-trimmed slice of its document, in order, valid UTF-8,
// within the token budget; without overlap the chunks cover every non-space byte exactly once.
void check_chunks(const Document& doc, const std::vector<Chunk>& chunks, const ChunkParams& p,
                  const ragkv::Tokenizer& tok) {
  REQUIRE(!chunks.empty());
  size_t covered_to = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    INFO("chunk " << c.id << " at " << c.offset << ": " << nlohmann::json(c.text).dump());
    CHECK(c.id == doc.id + "#" + std::to_string(i));
    CHECK(c.doc == doc.id);
    CHECK(c.title == doc.title);
    REQUIRE(c.offset + c.text.size() <= doc.text.size());
    CHECK(doc.text.compare(c.offset, c.text.size(), c.text) == 0);
    CHECK(ragkv::find_invalid_utf8(c.text) == std::string::npos);
    CHECK(!c.text.empty());
    CHECK(!std::isspace(static_cast<unsigned char>(c.text.front())));
    CHECK(!std::isspace(static_cast<unsigned char>(c.text.back())));
    CHECK(c.n_tokens == int(tok.encode(c.text, false).size()));
    CHECK(c.n_tokens <= p.chunk_tokens);
    if (p.chunk_overlap == 0) {
      CHECK(c.offset >= covered_to);
      for (size_t b = covered_to; b < c.offset; ++b) CHECK(std::isspace(static_cast<unsigned char>(doc.text[b])));
    } else if (i > 0) {
      CHECK(c.offset > chunks[i - 1].offset);
    }
    covered_to = c.offset + c.text.size();
  }
  for (size_t b = covered_to; b < doc.text.size(); ++b)
    CHECK(std::isspace(static_cast<unsigned char>(doc.text[b])));
}

// Paragraphs of short sentences, numbered so that every chunk is distinct.
std::string prose(int paragraphs, int sentences) {
  std::string s;
  for (int p = 0; p < paragraphs; ++p) {
    for (int i = 0; i < sentences; ++i)
      s += fmt::format("Sentence {} of part {} says the river runs north. ", i, p);
    s.back() = '\n';
    s += "\n";
  }
  return s;
}

}  // namespace

TEST_CASE("retrieval corpus: UTF-8 validator") {
  using ragkv::find_invalid_utf8;
  constexpr size_t ok = std::string::npos;
  CHECK(find_invalid_utf8("plain ascii") == ok);
  CHECK(find_invalid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9D\x84\x9E \xE4\xB8\xAD") == ok);  // é € 𝄞 中
  CHECK(find_invalid_utf8("ab\xC0\xAF") == 2);                                                // overlong '/'
  CHECK(find_invalid_utf8("\xE0\x80\xAF") == 0);                                              // overlong 3-byte
  CHECK(find_invalid_utf8("x\xED\xA0\x80") == 1);                                             // UTF-16 surrogate
  CHECK(find_invalid_utf8("\xF4\x90\x80\x80") == 0);                                          // above U+10FFFF
  CHECK(find_invalid_utf8("abc\xE2\x82") == 3);   // truncated at the end
  CHECK(find_invalid_utf8("\x80") == 0);          // lone continuation byte
  CHECK(find_invalid_utf8("\xE2\x28\xA1") == 0);  // bad continuation
  CHECK(find_invalid_utf8("\xFF") == 0);
}

TEST_CASE("UTF-8 repair: each maximal ill-formed subpart becomes one U+FFFD (Python's decode(errors='replace'))") {
  using ragkv::to_valid_utf8;
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  // Expected values: bytes.decode("utf-8", "replace") in CPython 3.
  CHECK(to_valid_utf8("ab") == "ab");
  CHECK(to_valid_utf8("a\xF0\x9F\x98\x80" "b") == "a\xF0\x9F\x98\x80" "b");  // a whole 4-byte character stays
  CHECK(to_valid_utf8("\xF6") == r);
  CHECK(to_valid_utf8("\xE2\x82") == r);            // cut inside a character: one replacement
  CHECK(to_valid_utf8("\xE2\x82" "A") == r + "A");
  CHECK(to_valid_utf8("\xF0\x9F\x98") == r);
  CHECK(to_valid_utf8("\xED\xA0\x80") == r + r + r);  // a surrogate: its second byte is out of range
  CHECK(to_valid_utf8("\xC3\xA9\x80\xC3") == "\xC3\xA9" + r + r);
  CHECK(to_valid_utf8("\xF4\x90\x80\x80") == r + r + r + r);
  CHECK(to_valid_utf8("\xE0\x80\xAF") == r + r + r);
  for (const std::string s : {"\xF6", "\xED\xA0\x80", "x\xE2\x82"})
    CHECK(ragkv::find_invalid_utf8(to_valid_utf8(s)) == std::string::npos);
}

TEST_CASE("retrieval corpus: files, directories and JSONL") {
  TempDir t("corpus");
  t.write("root/b.txt", "Beta text.\n");
  t.write("root/a.md", "\xEF\xBB\xBF# Alpha\n\nAlpha body.\n");  // BOM is dropped
  t.write("root/sub/c.txt", "Gamma.");
  t.write("root/.hidden/x.txt", "never read");
  t.write("root/.y.txt", "never read");
  t.write("root/image.png", "\x89PNG\0\0");  // other types inside a directory are counted, not read
  t.write("root/sub/manual.adoc", "= Manual\n\nText in AsciiDoc.\n");
  t.write("root/docs.jsonl",
          "{\"id\": \"j1\", \"title\": \"One\", \"text\": \"First.\"}\n"
          "\n"
          "{\"id\": 7, \"text\": \"Integer id.\", \"title\": null, \"extra\": [1]}\r\n");
  const fs::path single = t.write("other/single.txt", "Single file.");

  const ragkv::Corpus c = ragkv::load_corpus({t.path / "root", single}, OnError::fail);
  REQUIRE(c.docs.size() == 6);
  CHECK(c.skipped.empty());
  CHECK(c.files_read == 5);
  CHECK(c.docs[0].id == "a.md");
  CHECK(c.docs[0].text == "# Alpha\n\nAlpha body.\n");
  CHECK(c.docs[0].line == 0);
  CHECK(c.docs[1].id == "b.txt");
  CHECK(c.docs[2].id == "j1");
  CHECK(c.docs[2].title == "One");
  CHECK(c.docs[2].line == 1);
  CHECK(c.docs[3].id == "7");
  CHECK(c.docs[3].title == "");
  CHECK(c.docs[3].line == 3);
  CHECK(c.docs[4].id == "sub/c.txt");
  CHECK(c.docs[5].id == "single.txt");
  CHECK(c.docs[5].source == single.string());
  CHECK(c.other_files == std::map<std::string, size_t>{{".adoc", 1}, {".png", 1}});
  REQUIRE(c.other_file_examples.size() == 2);

  // --ext: the extensions read as text (replacing .txt and .md), given with or without the dot.
  const ragkv::Corpus a = ragkv::load_corpus({t.path / "root"}, OnError::fail, ragkv::text_extensions({"ADOC", ".txt"}));
  std::vector<std::string> ids;
  for (const auto& d : a.docs) ids.push_back(d.id);
  CHECK(ids == std::vector<std::string>{"b.txt", "j1", "7", "sub/c.txt", "sub/manual.adoc"});
  CHECK(a.other_files == std::map<std::string, size_t>{{".md", 1}, {".png", 1}});
  CHECK_THROWS_WITH_AS(ragkv::text_extensions({".jsonl"}), doctest::Contains("always read as JSONL"), ragkv::Error);
}

TEST_CASE("retrieval corpus: bad input fails naming file and line, or is skipped and counted") {
  TempDir t("badcorpus");
  const fs::path empty = t.write("empty.txt", " \n\t\n");
  const fs::path binary = t.write("binary.txt", std::string("line one\nline\0two\n", 18));
  const fs::path bad_utf8 = t.write("latin1.md", "ok\nstill ok\ncaf\xE9\n");
  const fs::path jsonl = t.write("docs.jsonl",
                                 "{\"id\":\"a\",\"text\":\"Good one.\"}\n"    // 1
                                 "{\"id\":\"b\",\"text\":\"unterminated}\n"   // 2 not JSON
                                 "{\"id\":\"c\",\"title\":\"no text\"}\n"     // 3 no text
                                 "{\"id\":\"a\",\"text\":\"Again.\"}\n"       // 4 duplicate id
                                 "{\"id\":\"d\",\"text\":\"caf\xE9\"}\n"      // 5 invalid UTF-8
                                 "[1, 2]\n"                                   // 6 not an object
                                 "{\"text\":\"no id\"}\n"                     // 7 no id
                                 "{\"id\":\"e\",\"text\":\"   \"}\n"          // 8 blank text
                                 "{\"id\":\"f\",\"text\":\"x\\u0000y\"}\n"    // 9 NUL
                                 "{\"id\":\"g\",\"text\":5}\n"                // 10 text not a string
                                 "{\"id\":\"h\",\"text\":\"Fine too.\"}\n");  // 11
  const fs::path empty_jsonl = t.write("none.jsonl", "\n\n");
  const fs::path dup_file = t.write("dir/a", "");  // no extension: ignored inside a directory

  CHECK(error_of([&] { ragkv::load_corpus({empty}, OnError::fail); }) ==
        empty.string() + ":1: empty document (no text)");
  CHECK(error_of([&] {
          ragkv::load_corpus({binary}, OnError::fail);
        }).starts_with(binary.string() + ":2: binary file"));
  CHECK(error_of([&] {
          ragkv::load_corpus({bad_utf8}, OnError::fail);
        }).starts_with(bad_utf8.string() + ":3: invalid UTF-8"));
  CHECK(error_of([&] {
          ragkv::load_corpus({jsonl}, OnError::fail);
        }).starts_with(jsonl.string() + ":2: not valid JSON"));
  CHECK(error_of([&] { ragkv::load_corpus({empty_jsonl}, OnError::fail); }) ==
        empty_jsonl.string() + ":1: empty JSONL file (no documents)");

  const ragkv::Corpus c = ragkv::load_corpus({empty, binary, bad_utf8, jsonl, empty_jsonl}, OnError::skip);
  REQUIRE(c.docs.size() == 2);
  CHECK(c.docs[0].id == "a");
  CHECK(c.docs[1].id == "h");
  std::vector<std::string> where;
  for (const auto& p : c.skipped)
    where.push_back(fs::path(p.source).filename().string() + ":" + std::to_string(p.line) + " " +
                    ragkv::input_problem_name(p.kind));
  const std::vector<std::string> want = {
      "empty.txt:1 empty",         "binary.txt:2 binary",        "latin1.md:3 invalid-utf8",
      "docs.jsonl:2 bad-json",     "docs.jsonl:3 missing-field", "docs.jsonl:4 duplicate-id",
      "docs.jsonl:5 invalid-utf8", "docs.jsonl:6 bad-json",      "docs.jsonl:7 missing-field",
      "docs.jsonl:8 empty",        "docs.jsonl:9 binary",        "docs.jsonl:10 missing-field",
      "none.jsonl:1 empty"};
  CHECK(where == want);
  for (const auto& p : c.skipped) CHECK(p.message.starts_with(p.source + ":" + std::to_string(p.line) + ": "));
  CHECK(c.skipped[5].message.find("first at " + jsonl.string() + ":1") != std::string::npos);
  const auto counts = c.skipped_by_kind();
  CHECK(counts.at("missing-field") == 3);
  CHECK(counts.at("empty") == 3);
  CHECK(counts.at("bad-json") == 2);
  CHECK(counts.at("invalid-utf8") == 2);
  CHECK(counts.at("binary") == 2);
  CHECK(counts.at("duplicate-id") == 1);

  // Duplicate ids across inputs, and what is an error under either policy.
  CHECK(error_of([&] { ragkv::load_corpus({jsonl, jsonl}, OnError::skip); }) == "(no error)");
  CHECK(error_of([&] {
          ragkv::load_corpus({empty, empty_jsonl}, OnError::skip);
        }).starts_with("corpus is empty: no usable document in"));
  CHECK(error_of([&] { ragkv::load_corpus({t.path / "dir"}, OnError::skip); }).starts_with("corpus is empty"));
  CHECK(error_of([&] {
          ragkv::load_corpus({t.path / "missing.txt"}, OnError::skip);
        }).starts_with("corpus path does not exist"));
  CHECK(error_of([&] { ragkv::load_corpus({dup_file}, OnError::skip); }).find("unsupported corpus file type") !=
        std::string::npos);
  CHECK(error_of([&] { ragkv::load_corpus({}, OnError::skip); }).starts_with("no corpus given"));
}

TEST_CASE("retrieval corpus: the shared QA corpora load cleanly") {
  const fs::path data = ragkv::test::source_dir().parent_path() / "shared" / "data";
  const fs::path squad = data / "squad-dev.corpus.jsonl";
  if (!fs::exists(squad)) {
    MESSAGE("skipped: " << squad << " not present");
    return;
  }
  const ragkv::Corpus c = ragkv::load_corpus({squad, data / "musique-cacheblend.corpus.jsonl"}, OnError::fail);
  CHECK(c.docs.size() == 1726 + 1255);
  CHECK(c.skipped.empty());
  CHECK(c.docs[0].id == "Super_Bowl_50#0");
  CHECK(c.docs[0].title == "Super Bowl 50");
}

TEST_CASE("retrieval chunker: a passage shorter than the window is one chunk") {
  const auto& tok = smollm_tokenizer();
  const Document doc{"doc/one.txt", "A title", "  Short passage. Two sentences.\n", "one.txt", 0};
  const auto chunks = ragkv::chunk_document(doc, tok, ChunkParams{});
  REQUIRE(chunks.size() == 1);
  CHECK(chunks[0].id == "doc/one.txt#0");
  CHECK(chunks[0].text == "Short passage. Two sentences.");
  CHECK(chunks[0].offset == 2);
  CHECK(chunks[0].title == "A title");
  CHECK(chunks[0].n_tokens == int(tok.encode("Short passage. Two sentences.", false).size()));
  CHECK(ragkv::chunk_embedding_text(chunks[0]) == "A title\nShort passage. Two sentences.");
}

TEST_CASE("retrieval chunker: windows snap to paragraph and sentence ends") {
  const auto& tok = smollm_tokenizer();
  const Document doc{"d", "", prose(6, 9), "", 0};
  ChunkParams p;
  p.chunk_tokens = 64;
  const auto chunks = ragkv::chunk_document(doc, tok, p);
  check_chunks(doc, chunks, p, tok);
  CHECK(chunks.size() >= 6);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    INFO(chunks[i].text);
    CHECK(chunks[i].text.back() == '.');           // every cut at a sentence end
    CHECK(chunks[i].n_tokens >= 64 - 64 / 5 - 1);  // ... within the last 20 % of the window
  }
  // Paragraph ends win over sentence ends: a cut near a blank line lands on it.
  int at_paragraph = 0;
  for (const auto& c : chunks)
    if (c.offset + c.text.size() + 2 <= doc.text.size() &&
        doc.text.compare(c.offset + c.text.size(), 2, "\n\n") == 0)
      ++at_paragraph;
  CHECK(at_paragraph >= 1);

  // Same input and parameters, same chunks (ids included).
  const auto again = ragkv::chunk_document(doc, tok, p);
  REQUIRE(again.size() == chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    CHECK(again[i].id == chunks[i].id);
    CHECK(again[i].text == chunks[i].text);
    CHECK(again[i].offset == chunks[i].offset);
  }
}

// Fuzz regression (fuzz/fuzz-corpus.cpp): SmolLM2's vocabulary has no token for some bytes
// (0x04, 0x06, 0xFF ...), which the tokenizer drops, merging across them (" \x06...\x06:" is
// the one token " :"). The token offsets lost the text at the first run of more than 16 such
// bytes, every later token got zero width, and the rest of the document became one chunk of far
// more than chunk_tokens tokens (27 and 40 for windows of 22 and 32 in the fuzzer's inputs).
TEST_CASE("retrieval chunker: characters the tokenizer drops, in long runs and inside merged tokens (fuzz regression)") {
  const ragkv::Tokenizer& tok = smollm_tokenizer();
  REQUIRE(tok.encode("\x04", false).empty());
  ChunkParams p;
  p.chunk_tokens = 16;
  p.chunk_overlap = 0;
  for (const std::string& junk : {std::string(200, '\x04'), std::string(" ") + std::string(30, '\x06') + ":" + std::string(30, '\x06') + "ort."}) {
    const Document doc{"d", "", prose(2, 3) + "town was" + junk + "\n\n" + prose(2, 3), "d.txt", 0};
    const std::vector<Chunk> chunks = ragkv::chunk_document(doc, tok, p);
    check_chunks(doc, chunks, p, tok);
    CHECK(chunks.size() >= 8);  // ~100 tokens of prose on either side: no giant tail chunk
  }
}

TEST_CASE("retrieval chunker: overlap, hard cuts and multi-byte text") {
  const auto& tok = smollm_tokenizer();
  SUBCASE("overlap repeats the tail of the previous window") {
    const Document doc{"o", "", prose(4, 12), "", 0};
    ChunkParams p;
    p.chunk_tokens = 48;
    p.chunk_overlap = 16;
    const auto chunks = ragkv::chunk_document(doc, tok, p);
    check_chunks(doc, chunks, p, tok);
    for (size_t i = 0; i + 1 < chunks.size(); ++i)
      CHECK(chunks[i + 1].offset < chunks[i].offset + chunks[i].text.size());
    CHECK(chunks.back().offset + chunks.back().text.size() == doc.text.size() - 2);  // the trailing "\n\n"
  }
  SUBCASE("text without any boundary is cut hard at the window") {
    std::string s;
    for (int i = 0; i < 400; ++i) s += char('a' + (i * 7) % 26);
    const Document doc{"h", "", s, "", 0};
    ChunkParams p;
    p.chunk_tokens = 32;
    const auto chunks = ragkv::chunk_document(doc, tok, p);
    check_chunks(doc, chunks, p, tok);
    CHECK(chunks.size() >= 3);
    std::string joined;
    for (const auto& c : chunks) joined += c.text;
    CHECK(joined == s);
  }
  SUBCASE("cuts never split a UTF-8 character") {
    // CJK and emoji without spaces: byte-level BPE splits these characters over several tokens.
    std::string s;
    const char* pieces[] = {"\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80", "\xC3\xA9t\xC3\xA9", "\xE3\x80\x82",
                            "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7"};
    for (int i = 0; i < 300; ++i) s += pieces[(i * 3) % 5];
    const Document doc{"u", "", s, "", 0};
    for (int w : {16, 17, 33}) {
      ChunkParams p;
      p.chunk_tokens = w;
      const auto chunks = ragkv::chunk_document(doc, tok, p);
      check_chunks(doc, chunks, p, tok);
      std::string joined;
      for (const auto& c : chunks) joined += c.text;
      CHECK(joined == s);
    }
  }
  SUBCASE("a long last sentence leaves no stray tail") {
    // Two short sentences, then a run-on sentence: whatever its length just past the window, the
    // document splits at the sentence end (or halfway), never into a window plus a crumb.
    const char* words[] = {"alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa"};
    for (int extra = 40; extra < 64; ++extra) {
      std::string s = "Short one here. Another short one.";
      for (int i = 0; i < extra; ++i) s += std::string(" ") + words[i % 7];
      s += ".";
      const Document doc{"t", "", s, "", 0};
      ChunkParams p;
      p.chunk_tokens = 64;
      const auto chunks = ragkv::chunk_document(doc, tok, p);
      INFO("extra words: " << extra);
      check_chunks(doc, chunks, p, tok);
      for (const auto& c : chunks) CHECK(c.n_tokens >= 8);
    }
  }
  SUBCASE("bad parameters are refused") {
    const Document doc{"x", "", "text", "", 0};
    CHECK_THROWS_AS(ragkv::chunk_document(doc, tok, ChunkParams{8, 0, 0.2}), ragkv::Error);
    CHECK_THROWS_AS(ragkv::chunk_document(doc, tok, ChunkParams{64, 64, 0.2}), ragkv::Error);
    CHECK_THROWS_AS(ragkv::chunk_document(doc, tok, ChunkParams{64, -1, 0.2}), ragkv::Error);
    CHECK_THROWS_AS(ragkv::chunk_document(doc, tok, ChunkParams{64, 0, 1.0}), ragkv::Error);
  }
}

TEST_CASE("retrieval chunker: SQuAD passages, parallel chunking equals sequential") {
  const auto& tok = smollm_tokenizer();
  const fs::path squad = ragkv::test::source_dir().parent_path() / "shared" / "data" / "squad-dev.corpus.jsonl";
  if (!fs::exists(squad)) {
    MESSAGE("skipped: " << squad << " not present");
    return;
  }
  ragkv::Corpus c = ragkv::load_corpus({squad}, OnError::fail);
  c.docs.resize(300);
  ChunkParams p;
  p.chunk_tokens = 128;
  p.chunk_overlap = 16;
  size_t calls = 0, last = 0, bytes = 0;
  for (const auto& d : c.docs) bytes += d.text.size();
  const auto all = ragkv::chunk_corpus(c.docs, tok, p, [&](size_t done, size_t total) {
    ++calls;
    CHECK(done > last);
    CHECK(total == bytes);
    last = done;
  });
  CHECK(calls >= 300);  // at least once per document, more within the long ones
  CHECK(last == bytes);
  size_t k = 0;
  for (const auto& doc : c.docs) {
    const auto one = ragkv::chunk_document(doc, tok, p);
    check_chunks(doc, one, p, tok);
    for (const auto& ch : one) {
      REQUIRE(k < all.size());
      CHECK(all[k].id == ch.id);
      CHECK(all[k].text == ch.text);
      ++k;
    }
  }
  CHECK(k == all.size());
  CHECK(all.size() > 300);  // many SQuAD passages exceed 128 tokens
}
