// Fuzz target: the corpus readers (retrieval/corpus.*: .txt/.md files, .jsonl documents,
// directories of them) under both --on-error policies, then the chunker (retrieval/chunker.*)
// with SmolLM2's tokenizer, as build-index runs them. Byte 0 holds flags (bits 0-1: the file's
// extension; bit 2: --on-error skip; bit 3: a directory of three files cut by fuzz-common.h's
// separator; bit 4: content-defined chunking), byte 1 the window (16..79 tokens), byte 2 the
// overlap; the rest is the file(s).
// Every chunk must be what the chunker promises (retrieval/chunker.h).
#include <cstdint>
#include <set>
#include <string>

#include <fmt/format.h>

#include "core/format/checksum.h"
#include "core/format/gguf.h"
#include "fuzz/fuzz-common.h"
#include "core/model/tokenizer.h"
#include "retrieval/chunker.h"
#include "retrieval/corpus.h"

using namespace ragkv;

namespace {

const Tokenizer& smollm_tokenizer() {
  static const GgufFile gguf(fuzz::model_file("SmolLM2-135M-Instruct.Q4_1.gguf").string());
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(gguf);
  return *tok;
}

void check_chunks(const Corpus& corpus, const std::vector<Chunk>& chunks, const ChunkParams& p, const Tokenizer& tok) {
  size_t doc = 0, index = 0;
  std::set<std::string> ids;
  for (const Chunk& c : chunks) {
    while (doc < corpus.docs.size() && corpus.docs[doc].id != c.doc) ++doc, index = 0;
    RAGKV_FUZZ_CHECK(doc < corpus.docs.size(), "chunk '{}' of no document, or out of order", c.id);
    const Document& d = corpus.docs[doc];
    if (p.chunking == Chunking::fixed) {
      RAGKV_FUZZ_CHECK(c.id == d.id + "#" + std::to_string(index), "chunk id '{}', expected '{}#{}'", c.id, d.id, index);
    } else {  // <doc>#<16 hex of the text>[.k], unique
      const std::string stem = fmt::format("{}#{:016x}", d.id, checksum64(c.text));
      RAGKV_FUZZ_CHECK(c.id == stem || c.id.starts_with(stem + "."), "chunk id '{}', expected '{}[.k]'", c.id, stem);
      RAGKV_FUZZ_CHECK(ids.insert(c.id).second, "chunk id '{}' given twice", c.id);
    }
    RAGKV_FUZZ_CHECK(c.offset <= d.text.size() && d.text.compare(c.offset, c.text.size(), c.text) == 0,
                     "chunk '{}' text is not the document's bytes at offset {}", c.id, c.offset);
    RAGKV_FUZZ_CHECK(c.n_tokens <= p.chunk_tokens, "chunk '{}' has {} tokens, window {}", c.id, c.n_tokens,
                     p.chunk_tokens);
    const size_t n = tok.encode(c.text, false).size();
    RAGKV_FUZZ_CHECK(size_t(c.n_tokens) == n, "chunk '{}' says {} tokens, its text has {}", c.id, c.n_tokens, n);
    ++index;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const Tokenizer& tok = smollm_tokenizer();
  const uint8_t flags = data[0];
  ChunkParams p;
  p.chunk_tokens = 16 + data[1] % 64;  // check_chunk_params: at least 16
  p.chunk_overlap = data[2] % p.chunk_tokens;
  p.chunking = flags & 16 ? Chunking::content : Chunking::fixed;
  const std::string_view body(reinterpret_cast<const char*>(data + 3), size - 3);
  const OnError on_error = flags & 4 ? OnError::skip : OnError::fail;

  const auto dir = fuzz::scratch_dir() / "corpus";
  std::filesystem::remove_all(dir);
  std::filesystem::path input;
  if (flags & 8) {
    const auto parts = fuzz::split_parts(body, 3);
    fuzz::write_scratch("corpus/a.txt", parts[0]);
    fuzz::write_scratch("corpus/sub/b.md", parts[1]);
    fuzz::write_scratch("corpus/sub/.hidden/c.txt", parts[1]);
    fuzz::write_scratch("corpus/c.jsonl", parts[2]);
    input = dir;
  } else {
    const char* ext[4] = {".jsonl", ".txt", ".md", ".JSONL"};
    input = fuzz::write_scratch(std::string("corpus/docs") + ext[flags & 3], body);
  }
  fuzz::expect_ok_or_error(dir.string(), [&] {
    const Corpus corpus = load_corpus({input}, on_error);
    for (const Document& d : corpus.docs) RAGKV_FUZZ_CHECK(!d.id.empty(), "a document without id from {}", d.source);
    const std::vector<Chunk> chunks = chunk_corpus(corpus.docs, tok, p);
    check_chunks(corpus, chunks, p, tok);
  });
  return 0;
}
