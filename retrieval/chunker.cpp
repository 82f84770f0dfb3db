// Chunker: token windows over each document, snapped to paragraph/sentence ends, cut on UTF-8
// character boundaries (see chunker.h for the contract and the chunk id scheme).
#include "retrieval/chunker.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "core/format/checksum.h"
#include "core/model/tokenizer.h"
#include "core/util/enum-names.h"
#include "core/util/error.h"

namespace ragkv {

namespace {

constexpr int kMaxClosers = 8;          // closing quotes/brackets skipped before a sentence end
constexpr size_t kMaxSpaceScan = 256;   // whitespace bytes looked at on each side of a cut
// Content-defined cuts: each sentence or paragraph end is ranked by a hash of the kAnchorBytes
// bytes of text before it (chunker.h).
constexpr size_t kAnchorBytes = 48;

constexpr EnumNames<Chunking, 2> kChunkingNames{{{{Chunking::fixed, "fixed"}, {Chunking::content, "content"}}}};

bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Moves a byte position back to the first byte of the UTF-8 character it falls in.
size_t char_start(std::string_view t, size_t p) {
  while (p > 0 && p < t.size() && (static_cast<unsigned char>(t[p]) & 0xC0) == 0x80) --p;
  return p;
}

// Bytes of the UTF-8 character starting at p (1 for a stray continuation or invalid byte).
size_t char_length(std::string_view t, size_t p) {
  const auto b = static_cast<unsigned char>(t[p]);
  const size_t n = b < 0xC0 || b >= 0xF8 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, t.size() - p);
}

// The characters a tokenizer drops: those that encode to no token (byte-level BPE drops the bytes
// its vocabulary has no token for — SmolLM2 has none for 0x04 or 0xFF — and merges across them).
// One-byte answers are remembered.
class DroppedChars {
 public:
  explicit DroppedChars(const Tokenizer& tok) : tok_(tok) { ascii_.fill(-1); }
  bool operator()(std::string_view ch) {
    if (ch.size() == 1 && static_cast<unsigned char>(ch[0]) < 0x80) {
      int8_t& known = ascii_[static_cast<unsigned char>(ch[0])];
      if (known < 0) known = tok_.encode(ch, false).empty() ? 1 : 0;
      return known == 1;
    }
    return tok_.encode(ch, false).empty();
  }

 private:
  const Tokenizer& tok_;
  std::array<int8_t, 128> ascii_;
};

// Where piece ends when it spells text from pos, stepping over dropped characters before it and
// inside it (a token merged across them); nullopt when it does not. The dropped characters before
// it count as the token's, so chunks still cover every byte of the text.
std::optional<size_t> match_piece(std::string_view text, size_t pos, std::string_view piece, DroppedChars& dropped) {
  size_t j = pos;
  for (size_t i = 0; i < piece.size();) {
    if (j < text.size() && text[j] == piece[i]) {
      ++i, ++j;
      continue;
    }
    if (j >= text.size()) return std::nullopt;
    const size_t len = char_length(text, j);
    if (!dropped(text.substr(j, len))) return std::nullopt;
    j += len;
  }
  return j;
}

// Byte offset in text where each token starts (offs[i]), with offs[n] = text.size(), from the
// token_to_piece lengths. For byte-level BPE the pieces spell the text exactly, but for the
// characters the vocabulary cannot spell, which the tokenizer drops: a piece is matched stepping
// over those (before it and inside it, however many: a long run of them must not leave every
// later token behind it; found by fuzzing the chunker). Where a piece still does not match (a
// SentencePiece prefix space, a normalised character) it is looked for a little further on;
// failing that the token gets zero width. Offsets are therefore always monotonic and within the
// text, and exact wherever the pieces spell the text.
std::vector<size_t> token_offsets(std::string_view text, const std::vector<TokenId>& ids, const Tokenizer& tok) {
  constexpr size_t kResyncWindow = 16;
  std::vector<size_t> offs(ids.size() + 1, text.size());
  DroppedChars dropped(tok);
  size_t pos = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    offs[i] = pos;
    const std::string piece_s = tok.token_to_piece(ids[i]);
    std::string_view piece = piece_s;
    if (piece.empty()) continue;
    if (text.compare(pos, piece.size(), piece) == 0) {
      pos += piece.size();
      continue;
    }
    if (const auto end = match_piece(text, pos, piece, dropped)) {
      pos = *end;
      continue;
    }
    if (piece.front() == ' ' && pos == 0) piece.remove_prefix(1);  // SentencePiece's added space
    const size_t f = text.substr(pos, kResyncWindow + piece.size()).find(piece);
    if (!piece.empty() && f != std::string_view::npos) {
      offs[i] = pos + f;
      pos += f + piece.size();
    }
  }
  offs[ids.size()] = text.size();
  for (size_t& o : offs) o = char_start(text, o);  // never cut inside a character
  return offs;
}

// Does t end a sentence? 1: ASCII/Latin terminator (needs whitespace after it to count),
// 2: a CJK full-width terminator (counts without whitespace), 0: no.
int sentence_end_kind(std::string_view t) {
  // Skip closing quotes and brackets: `He said "no."` ends a sentence. At most kMaxClosers of
  // them: a megabyte of ']' must not be walked back at every candidate cut.
  for (int closers = 0; closers < kMaxClosers; ++closers) {
    if (!t.empty() && std::string_view(")]}\"'").find(t.back()) != std::string_view::npos)
      t.remove_suffix(1);
    else if (t.ends_with("\xE2\x80\x9D") || t.ends_with("\xE2\x80\x99"))  // ” ’
      t.remove_suffix(3);
    else if (t.ends_with("\xC2\xBB"))  // »
      t.remove_suffix(2);
    else
      break;
  }
  if (t.empty()) return 0;
  if (t.back() == '.' || t.back() == '!' || t.back() == '?' || t.ends_with("\xE2\x80\xA6")) return 1;  // … too
  if (t.ends_with("\xE3\x80\x82") || t.ends_with("\xEF\xBC\x81") || t.ends_with("\xEF\xBC\x9F"))
    return 2;  // 。！？
  return 0;
}

// How good a cut at byte p is: 3 paragraph end (a blank line), 2 sentence end, 1 line end, 0 none.
// The whitespace around p is looked at up to kMaxSpaceScan bytes each way, so a call costs O(1)
// however long a run of spaces the text holds (bounded work per byte: chunker.h).
int boundary_score(std::string_view t, size_t p) {
  size_t l = p, r = p;
  while (l > 0 && p - l < kMaxSpaceScan && is_space(static_cast<unsigned char>(t[l - 1]))) --l;
  while (r < t.size() && r - p < kMaxSpaceScan && is_space(static_cast<unsigned char>(t[r]))) ++r;
  const auto newlines = std::count(t.begin() + l, t.begin() + r, '\n');
  if (newlines >= 2) return 3;
  const int s = sentence_end_kind(t.substr(0, l));
  if (s == 2 || (s == 1 && r > l)) return 2;
  return newlines == 1 ? 1 : 0;
}

// The rank of a cut at byte p: a hash of the kAnchorBytes bytes before it (its trailing whitespace
// aside) — the text alone decides, not where a chunk began.
uint64_t anchor_rank(std::string_view t, size_t p) {
  size_t e = p;
  while (e > 0 && p - e < kMaxSpaceScan && is_space(static_cast<unsigned char>(t[e - 1]))) --e;
  const size_t b = e > kAnchorBytes ? e - kAnchorBytes : 0;
  return checksum64(t.substr(b, e - b));
}

}  // namespace

const char* chunking_name(Chunking c) { return kChunkingNames.name(c); }
Chunking parse_chunking(const std::string& s) { return kChunkingNames.parse(s, "chunking"); }

void check_chunk_params(const ChunkParams& p) {
  if (p.chunk_tokens < 16 || p.chunk_tokens > 1 << 20)
    fail("chunk_tokens must be in [16, 1048576], got {}", p.chunk_tokens);
  if (p.chunk_overlap < 0 || p.chunk_overlap >= p.chunk_tokens)
    fail("chunk_overlap must be in [0, chunk_tokens) = [0, {}), got {}", p.chunk_tokens, p.chunk_overlap);
  if (!(p.snap_fraction >= 0.0 && p.snap_fraction < 1.0))
    fail("snap_fraction must be in [0, 1), got {}", p.snap_fraction);
}

std::vector<Chunk> chunk_document(const Document& doc, const Tokenizer& tok, const ChunkParams& p,
                                  const std::function<void(size_t)>& advanced) {
  check_chunk_params(p);
  const std::string_view text = doc.text;
  const auto ids = tok.encode(text, false);
  const size_t n = ids.size(), W = size_t(p.chunk_tokens), overlap = size_t(p.chunk_overlap);
  const std::vector<size_t> offs = token_offsets(text, ids, tok);
  const size_t snap_tokens = size_t(std::floor(p.snap_fraction * double(W)));
  auto end_byte = [&](size_t e) { return e >= n ? text.size() : offs[e]; };

  std::vector<Chunk> chunks;
  std::unordered_map<std::string, int> named;  // content ids given so far (content chunking)
  size_t s = 0;
  while (s < n) {
    // Window [s, e): the rest of the document, or W tokens snapped back to the best boundary
    // in the last snap_tokens (a paragraph beats a sentence beats a line; the latest wins ties).
    size_t e = n;
    bool anchored = false;
    if (n - s > W && p.chunking == Chunking::content) {
      // Of the paragraph ends in the window's second half, else its sentence ends, the one of
      // lowest rank: where the text itself says to cut (winnowing, as in content-defined chunking).
      int best_score = 0;
      uint64_t best_rank = 0;
      for (size_t t = s + std::max<size_t>(1, W / 2); t <= s + W; ++t) {
        if (offs[t] <= offs[s]) continue;
        const int sc = boundary_score(text, offs[t]);
        if (sc < 2 || sc < best_score) continue;
        const uint64_t rank = anchor_rank(text, offs[t]);
        if (sc > best_score || rank < best_rank) best_score = sc, best_rank = rank, e = t;
      }
      anchored = best_score >= 2;
    }
    if (n - s > W && !anchored) {
      e = s + W;
      int best = 0;
      const size_t lo = s + std::max<size_t>(1, W - snap_tokens);
      for (size_t t = s + W; t >= lo; --t) {
        if (offs[t] <= offs[s]) break;
        const int sc = boundary_score(text, offs[t]);
        if (sc > best) best = sc, e = t;
      }
      // A hard cut that would leave a tail shorter than the snap zone (a long last sentence)
      // ends instead at the latest sentence end anywhere in the window or, with none, halfway.
      if (best == 0 && n - e < std::max<size_t>(1, snap_tokens)) {
        e = s + (n - s + 1) / 2;
        for (size_t t = lo - 1; t > s; --t) {
          if (offs[t] <= offs[s]) break;
          if (boundary_score(text, offs[t]) >= 2) {
            e = t;
            break;
          }
        }
      }
    }
    const size_t a = offs[s];
    while (e < n && end_byte(e) <= a) ++e;  // a window holds at least one whole character

    // Emit the trimmed window. Its standalone encoding can take a token more than its share of
    // the document's (BPE merges differ at a cut): then shorten the window a token at a time.
    for (;;) {
      size_t from = a, to = end_byte(e);
      while (from < to && is_space(static_cast<unsigned char>(text[from]))) ++from;
      while (to > from && is_space(static_cast<unsigned char>(text[to - 1]))) --to;
      if (from == to) break;  // whitespace only: no chunk
      const std::string_view piece = text.substr(from, to - from);
      const int n_tok = int(tok.encode(piece, false).size());
      const bool can_shorten = e - 1 > s && end_byte(e - 1) > a;
      if (size_t(n_tok) <= W || !can_shorten) {
        chunks.push_back(Chunk{fmt::format("{}#{}", doc.id, chunks.size()), doc.id, doc.title, std::string(piece),
                               from, n_tok});
        if (p.chunking == Chunking::content) {  // named by its text: the same text keeps its id
          const std::string stem = fmt::format("{}#{:016x}", doc.id, checksum64(piece));
          const int k = ++named[stem];  // the k-th chunk of this text in the document
          chunks.back().id = k == 1 ? stem : fmt::format("{}.{}", stem, k);
        }
        break;
      }
      --e;
    }
    if (e >= n) break;
    if (advanced) advanced(end_byte(e));
    s = std::max(s + 1, e > overlap ? e - overlap : size_t(0));
  }
  return chunks;
}

std::vector<Chunk> chunk_corpus(const std::vector<Document>& docs, const Tokenizer& tok, const ChunkParams& p,
                                const std::function<void(size_t, size_t)>& progress) {
  check_chunk_params(p);
  std::vector<std::vector<Chunk>> per_doc(docs.size());
  std::exception_ptr error;
  std::mutex mu;
  size_t total = 0, done = 0;  // text bytes; done guarded by mu
  for (const Document& d : docs) total += d.text.size();
  const long n_docs = long(docs.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (long i = 0; i < n_docs; ++i) {
    size_t reported = 0;  // bytes of this document counted in done
    auto advance_to = [&](size_t at) {
      if (!progress || at <= reported) return;
      std::lock_guard lock(mu);
      done += at - reported;
      reported = at;
      progress(done, total);
    };
    try {
      per_doc[size_t(i)] = chunk_document(docs[size_t(i)], tok, p, advance_to);
    } catch (...) {
      std::lock_guard lock(mu);
      if (!error) error = std::current_exception();
    }
    advance_to(docs[size_t(i)].text.size());
  }
  if (error) std::rethrow_exception(error);
  std::vector<Chunk> all;
  size_t n_chunks = 0;
  for (const auto& v : per_doc) n_chunks += v.size();
  all.reserve(n_chunks);
  for (auto& v : per_doc)
    for (auto& c : v) all.push_back(std::move(c));
  return all;
}

std::string chunk_embedding_text(const Chunk& c) { return c.title.empty() ? c.text : c.title + "\n" + c.text; }

}  // namespace ragkv
