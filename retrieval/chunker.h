// Chunker (DESIGN.md §5): cuts each document into windows of at most `chunk_tokens` LLM tokens
// with `chunk_overlap` tokens shared between neighbours. A window end is snapped back to a
// paragraph end, else a sentence end, else a line end when one lies in its last `snap_fraction`
// of tokens; cuts never split a UTF-8 sequence. A document shorter than the window is one chunk.
// A hard cut that would leave a tail shorter than that zone (a long final sentence) moves back
// to the latest sentence end in the window, or to the middle, so no chunk is a stray "." .
//
// Two ways to choose the cuts (ChunkParams::chunking; `build-index --chunking`):
// * fixed: the window above from each chunk's start, so an edit that adds or removes tokens moves
//   every later window, and the ids "<doc id>#<index>" (0, 1, ... in document order) name
//   positions: an inserted sentence renames and changes every later chunk.
// * content (content-defined chunking, as LBFS and FastCDC cut files where a hash of the content
//   says, here over sentence ends): of the paragraph ends in the second half of the window — else
//   its sentence ends — a chunk ends at the one whose preceding 48 bytes of text hash lowest (the
//   winnowing rule: a local minimum of a property of the text alone); with neither in the window,
//   as fixed does. A local minimum stays the minimum when an edit elsewhere shifts the window a
//   little, and once two versions of a document cut at the same place they cut alike from there
//   on: an edit changes the chunks it touches and, rarely, one or two around them. The ids are
//   "<doc id>#<16 hex of the chunk's text>" (".2", ".3", … after a text repeated within the
//   document): the same text in the same document keeps its id, so its cache key
//   (core/kv/kv-store.h: chunk id and token ids) too.
// Either way the same corpus and parameters give the same chunks, a chunk id names its document
// before its last '#', and n_tokens is the count of the chunk text tokenized on its own, as the
// prompt tokenizes it (DESIGN.md §4), never more than chunk_tokens.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "retrieval/corpus.h"

namespace ragkv {

class Tokenizer;

enum class Chunking : uint8_t { fixed, content };
const char* chunking_name(Chunking c);
Chunking parse_chunking(const std::string& s);  // Error naming the accepted values

struct ChunkParams {
  int chunk_tokens = 256;      // window length in LLM tokens
  int chunk_overlap = 0;       // tokens repeated at the start of the next window, < chunk_tokens
  double snap_fraction = 0.2;  // a paragraph/sentence end in the window's last 20 % ends it there
  Chunking chunking = Chunking::fixed;  // (the library's; `build-index` defaults to content)
};
void check_chunk_params(const ChunkParams& p);  // Error naming the bad parameter

struct Chunk {
  std::string id;     // "<doc>#<index>" (fixed) or "<doc>#<16 hex of text>[.k]" (content)
  std::string doc;    // Document::id
  std::string title;  // Document::title
  std::string text;   // == document text.substr(offset, text.size()), whitespace-trimmed
  size_t offset = 0;  // byte offset of text in the document text
  int n_tokens = 0;   // LLM tokens of text encoded alone (no BOS)
};

// Bounded work per byte on any text: the document is tokenized once (tokenizers bound their own
// work, core/model/tokenizer.h), each window looks at a bounded stretch around its candidate cuts, and
// advanced(bytes) reports how far into the text the chunks have got, after each window (progress
// during one long document).
std::vector<Chunk> chunk_document(const Document& doc, const Tokenizer& tok, const ChunkParams& p,
                                  const std::function<void(size_t)>& advanced = {});

// All documents, chunks in document order (documents are chunked in parallel; the result does
// not depend on the thread count). progress(done_bytes, total_bytes) counts document text bytes,
// rises strictly, ends at the total, and is called under a lock (one thread at a time).
std::vector<Chunk> chunk_corpus(const std::vector<Document>& docs, const Tokenizer& tok, const ChunkParams& p,
                                const std::function<void(size_t, size_t)>& progress = {});

// The text the embedder sees for a chunk: "title\ntext", or text when there is no title.
std::string chunk_embedding_text(const Chunk& c);

}  // namespace ragkv
