// Bounded work per byte on hostile text: giant runs are cut before merging (core/model/tokenizer.h
// split_giant_runs), the chunker looks at a bounded stretch around each cut, and both grow linearly
// with the input — checked as a ratio of thread CPU times (a quadratic stage takes 64 times as long
// on 8 times the input; linear ones about 8), not as absolute seconds.
#include <doctest/doctest.h>

#include <time.h>

#include <functional>
#include <string>

#include "core/format/gguf.h"
#include "core/model/tokenizer.h"
#include "core/model/wordpiece.h"
#include "retrieval/chunker.h"
#include "tests/test-paths.h"

namespace {

using ragkv::Tokenizer;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double cpu_time_of(const std::function<void()>& f) {
  const double t0 = thread_cpu_seconds();
  f();
  return thread_cpu_seconds() - t0;
}

// The hostile inputs of the issue and their relatives, n bytes each.
std::vector<std::pair<std::string, std::string>> hostile(size_t n) {
  return {{"[ then ]", std::string(n / 2, '[') + std::string(n - n / 2, ']')},
          {"spaces", std::string(n, ' ')},
          {"letters", std::string(n, 'a')},
          {"newlines", std::string(n, '\n')}};
}

// Work on 8n bytes costs at most 20 times the work on n (linear: 8; quadratic: 64), with 50 ms
// of slack for the small case's fixed costs.
void check_linear(const std::string& what, const std::function<void(size_t)>& work, size_t n) {
  work(n / 4);  // warm caches and allocations
  const double small = cpu_time_of([&] { work(n); });
  const double large = cpu_time_of([&] { work(8 * n); });
  INFO(what << ": " << n << " bytes " << small << " s, " << 8 * n << " bytes " << large << " s");
  CHECK(large <= 20 * small + 0.05);
}

struct Loaded {
  std::unique_ptr<ragkv::GgufFile> gguf;
  std::unique_ptr<Tokenizer> tok;
};
Loaded load(const std::string& path) {
  Loaded l;
  l.gguf = std::make_unique<ragkv::GgufFile>(path);
  l.tok = Tokenizer::from_gguf(*l.gguf);
  return l;
}

}  // namespace

TEST_CASE("text bounds: split_giant_runs cuts only runs longer than the cap, on character boundaries") {
  using ragkv::split_giant_runs;
  const std::string prose = "A normal sentence, with words and punctuation. Another one!\n\nA paragraph.";
  CHECK(split_giant_runs(prose, 16) == std::vector<std::string_view>{prose});
  CHECK(split_giant_runs("", 16).empty());
  const std::string run = "ab " + std::string(40, 'x') + "  " + std::string(20, ' ') + "z";
  const auto pieces = split_giant_runs(run, 16);
  std::string joined;
  for (auto p : pieces) joined += p;
  CHECK(joined == run);
  CHECK(pieces.size() == 4);  // "ab xxx…x"(16 x) | 16 x | 8 x + 16 spaces | 6 spaces + "z"
  // Multi-byte characters are never split: 'é' is two bytes.
  std::string accents;
  for (int i = 0; i < 20; ++i) accents += "\xC3\xA9";
  for (auto p : split_giant_runs(accents, 7)) {
    CHECK(p.size() <= 7);
    CHECK((static_cast<unsigned char>(p.front()) & 0xC0) != 0x80);
  }
}

TEST_CASE("text bounds: a giant run tokenizes as its capped pieces") {
  // Byte-level BPE: exactly the ids of the pieces encoded one by one.
  const Loaded smol = load(ragkv::test::smollm_path());
  std::string above(ragkv::kMaxRunBytes + 1000, '[');  // appended, not +: GCC 12 warns falsely on the + form
  above += ' ';
  above.append(3 * ragkv::kMaxRunBytes, 'a');
  std::vector<ragkv::TokenId> pieces;
  for (std::string_view p : ragkv::split_giant_runs(above)) {
    const auto part = smol.tok->encode(p, false);
    pieces.insert(pieces.end(), part.begin(), part.end());
  }
  CHECK(ragkv::split_giant_runs(above).size() == 4);  // 25000 [ | 1000 [, space, 25000 a | 25000 a | 25000 a
  CHECK(smol.tok->encode(above, false) == pieces);
  CHECK(smol.tok->decode(pieces) == above);
  // SentencePiece: the pieces after the first get no space prefix; the text round-trips.
  const Loaded gemma = load(ragkv::test::gemma_path());
  CHECK(gemma.tok->decode(gemma.tok->encode(above, false)) == above);
}

TEST_CASE("text bounds: both tokenizers and WordPiece do linear work on hostile text" * doctest::test_suite("real-model")) {
  for (const std::string& path : {ragkv::test::smollm_path(), ragkv::test::gemma_path()}) {
    const Loaded l = load(path);
    for (const auto& [name, text] : hostile(1 << 20)) {
      const std::string t = text;  // 1 MiB; the small case is its first 128 KiB
      check_linear(path + ": " + name, [&](size_t n) { (void)l.tok->encode(std::string_view(t).substr(0, n), false); },
                   t.size() / 8);
    }
  }
  const auto wp = ragkv::WordPieceTokenizer::load(ragkv::test::model_path("all-MiniLM-L6-v2"));
  for (const auto& [name, text] : hostile(1 << 20)) {
    const std::string t = text;
    check_linear("wordpiece: " + name, [&](size_t n) { (void)wp.encode(std::string_view(t).substr(0, n)); },
                 t.size() / 8);
  }
}

TEST_CASE("text bounds: the chunker does linear work and reports progress within one long document" * doctest::test_suite("real-model")) {
  const Loaded l = load(ragkv::test::smollm_path());
  for (const auto& [name, text] : hostile(1 << 20)) {
    const std::string t = text;
    for (const ragkv::Chunking chunking : {ragkv::Chunking::fixed, ragkv::Chunking::content})
      check_linear(std::string("chunker (") + ragkv::chunking_name(chunking) + "): " + name,
                   [&](size_t n) {
                     const ragkv::Document doc{"d", "", t.substr(0, n), "", 0};
                     (void)ragkv::chunk_document(doc, *l.tok, ragkv::ChunkParams{256, 0, 0.2, chunking});
                   },
                   t.size() / 8);
  }
  const ragkv::Document doc{"d", "", hostile(1 << 20)[0].second, "", 0};
  size_t calls = 0, last = 0;
  const auto chunks = ragkv::chunk_document(doc, *l.tok, ragkv::ChunkParams{}, [&](size_t at) {
    ++calls;
    CHECK(at > last);
    CHECK(at <= doc.text.size());
    last = at;
  });
  CHECK(chunks.size() > 100);
  CHECK(calls + 1 >= chunks.size());  // after every window but the last
  for (const auto& c : chunks) CHECK(c.n_tokens <= 256);
}
