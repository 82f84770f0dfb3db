// GPT-2 byte-level BPE (tokenizer.ggml.model "gpt2"), as Hugging Face tokenizers runs it:
//   1. special tokens are cut out of the text (Tokenizer::split_special);
//   2. each stretch is pre-tokenized by the regexes tokenizer.ggml.pre names, applied in turn
//      (each one splits the pieces of the previous one, keeping matches and gaps: "isolated");
//   3. each piece's bytes become GPT-2's printable characters (bytes_to_unicode) and are merged
//      pairwise, lowest merge rank first (tokenizer.ggml.merges order), leftmost on ties.
// Results per piece are cached: prose repeats its words, so most pieces skip step 3. Pieces
// longer than kMaxRunBytes (a megabyte of '[') are cut first (tokenizer.h), so merging is bounded
// per byte on any input; the merges themselves run on a heap, O(log n) each.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <map>
#include <mutex>
#include <queue>

#include "core/util/error.h"
#include "core/format/gguf.h"
#include "core/model/tokenizer.h"

namespace ragkv {
namespace {

// GPT-2's byte <-> printable code point mapping: printable Latin-1 bytes stand for themselves,
// the other 68 bytes take code points 256, 257, ... in byte order.
struct ByteLevelMap {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> cp_to_byte;  // -1: not a byte-level code point

  ByteLevelMap() {
    cp_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int cp = printable ? b : next++;
      cp_to_byte[cp] = int16_t(b);
      byte_to_utf8[b] = cp < 0x80 ? std::string(1, char(cp))
                                  : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    }
  }
};

const ByteLevelMap& byte_level_map() {
  static const ByteLevelMap m;
  return m;
}

// Token text (byte-level spelling) back to bytes. Code points outside the byte-level alphabet
// (a mislabelled token) are kept as their UTF-8.
std::string byte_level_decode(const std::string& text) {
  const auto& m = byte_level_map();
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<uint8_t>(text[i]);
    int cp = -1;
    size_t len = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = (c & 0x1F) << 6 | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
      len = 2;
    }
    if (cp >= 0 && cp < int(m.cp_to_byte.size()) && m.cp_to_byte[cp] >= 0) {
      out += char(m.cp_to_byte[cp]);
    } else {
      if ((c & 0xF0) == 0xE0) len = 3;
      else if ((c & 0xF8) == 0xF0) len = 4;
      out.append(text, i, len);
    }
    i += len;
  }
  return out;
}

// Pre-tokenizer regexes by tokenizer.ggml.pre, as in llama.cpp (llama-vocab.cpp) and the
// tokenizer.json files of the models; PCRE2 takes the original patterns, (?i:...) included.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizer {
  std::vector<const char*> regexes;
  bool ignore_merges = false;  // a piece that is a whole token is not merged (Llama 3)
};

const std::map<std::string, PreTokenizer, std::less<>>& pre_tokenizers() {
  static const std::map<std::string, PreTokenizer, std::less<>> table = {
      {"default", {{kGpt2}}},
      {"gpt2", {{kGpt2}}},
      {"gpt-2", {{kGpt2}}},
      {"mpt", {{kGpt2}}},
      {"olmo", {{kGpt2}}},
      // StarCoder family: every digit alone, then GPT-2's regex.
      {"smollm", {{R"(\p{N})", kGpt2}}},
      {"starcoder", {{R"(\p{N})", kGpt2}}},
      {"refact", {{R"(\p{N})", kGpt2}}},
      {"codeshell", {{R"(\p{N})", kGpt2}}},
      {"command-r", {{R"(\p{N})", kGpt2}}},
      {"llama3", {{kLlama3}, true}},
      {"llama-v3", {{kLlama3}, true}},
      {"llama-bpe", {{kLlama3}, true}},
      {"smaug-bpe", {{kLlama3}}},
      {"dbrx", {{kLlama3}}},
      {"qwen2", {{kQwen2}}},
      {"deepseek-r1-qwen", {{kQwen2}}},
      {"stablelm2", {{kQwen2}}},
  };
  return table;
}

std::string known_pre_names() {
  std::string s;
  for (const auto& [name, _] : pre_tokenizers()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

// One compiled regex, shared by all threads; match data and JIT stack are per thread.
class Regex {
 public:
  explicit Regex(const char* pattern) : pattern_(pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("pre-tokenizer regex /{}/ does not compile at offset {}: {}", pattern, off, reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the pieces of `s`: matches and the gaps between them, in order.
  void split(std::string_view s, std::vector<std::string_view>& out) const {
    Scratch& sc = scratch();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t last = 0, at = 0;
    while (at < s.size()) {
      const int rc = pcre2_match(code_, subject, s.size(), at, 0, sc.match, sc.context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("pre-tokenizer regex /{}/ failed: {}", pattern_, reinterpret_cast<char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(sc.match);
      const size_t b = ov[0], e = ov[1];
      if (e == b) {  // empty match: step over one character and search on
        at = b + 1;
        while (at < s.size() && (static_cast<uint8_t>(s[at]) & 0xC0) == 0x80) ++at;
        continue;
      }
      if (b > last) out.push_back(s.substr(last, b - last));
      out.push_back(s.substr(b, e - b));
      last = at = e;
    }
    if (last < s.size()) out.push_back(s.substr(last));
  }

 private:
  struct Scratch {
    pcre2_match_data* match = pcre2_match_data_create(16, nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    Scratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~Scratch() {
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
      pcre2_match_data_free(match);
    }
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }

  std::string pattern_;
  pcre2_code* code_ = nullptr;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(const GgufFile& gguf) {
    tokens_ = gguf.get_string_array("tokenizer.ggml.tokens");
    const int64_t n = int64_t(tokens_.size());
    if (n == 0 || n > INT32_MAX) fail("{}: tokenizer.ggml.tokens has {} entries", gguf.path(), n);
    types_ = gguf.has("tokenizer.ggml.token_type") ? gguf.get_int_array("tokenizer.ggml.token_type")
                                                    : std::vector<int32_t>(size_t(n), 1);
    if (int64_t(types_.size()) != n)
      fail("{}: tokenizer.ggml.token_type has {} entries, expected {} (one per token)", gguf.path(),
           types_.size(), n);
    init_vocab(tokens_, types_);

    const std::string pre = gguf.find_string("tokenizer.ggml.pre").value_or("default");
    const auto it = pre_tokenizers().find(pre);
    if (it == pre_tokenizers().end())
      fail("{}: pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; known: {}", gguf.path(), pre,
           known_pre_names());
    for (const char* r : it->second.regexes) regexes_.push_back(std::make_unique<Regex>(r));
    ignore_merges_ = it->second.ignore_merges;

    const auto& bl = byte_level_map();
    for (int b = 0; b < 256; ++b) byte_token_[b] = find_token(bl.byte_to_utf8[b]);

    const auto merges = gguf.get_string_array("tokenizer.ggml.merges");
    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string& m = merges[rank];
      const size_t sp = m.find(' ', 1);  // the left part is never empty; "Ġ" stands for space
      if (sp == std::string::npos)
        fail("{}: merge {} ('{}') is not two tokens separated by a space", gguf.path(), rank, m);
      const TokenId l = find_token(std::string_view(m).substr(0, sp));
      const TokenId r = find_token(std::string_view(m).substr(sp + 1));
      const TokenId merged = find_token(m.substr(0, sp) + m.substr(sp + 1));
      if (l < 0 || r < 0 || merged < 0) continue;  // cannot produce a token: never applies
      merges_.emplace(pair_key(l, r), Merge{int32_t(rank), merged});  // first (best) rank wins
    }

    pieces_.resize(tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (types_[i] == 3) continue;  // control: renders as nothing
      pieces_[i] = types_[i] == 4 ? tokens_[i] : byte_level_decode(tokens_[i]);
    }
    init_special_ids(gguf);
  }

  std::vector<TokenId> encode(std::string_view text, bool parse_special) const override {
    std::vector<TokenId> out;
    std::vector<std::string_view> words, next;
    for (const Fragment& f : split_special(text, parse_special)) {
      if (f.special >= 0) {
        out.push_back(f.special);
        continue;
      }
      words.assign(1, f.text);
      for (const auto& re : regexes_) {
        next.clear();
        for (std::string_view w : words) re->split(w, next);
        words.swap(next);
      }
      for (std::string_view w : words) {
        if (w.size() <= kMaxRunBytes) {
          encode_word(w, out);
          continue;
        }
        for (std::string_view piece : split_giant_runs(w)) encode_word(piece, out);  // bounded work (tokenizer.h)
      }
    }
    return out;
  }

  std::string token_to_piece(TokenId id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[size_t(id)] : std::string();
  }
  int32_t vocab_size() const override { return int32_t(tokens_.size()); }
  const std::string& token_text(TokenId id) const override {
    static const std::string none;
    return id >= 0 && id < vocab_size() ? tokens_[size_t(id)] : none;
  }

 private:
  struct Merge {
    int32_t rank;
    TokenId merged;
  };
  static uint64_t pair_key(TokenId l, TokenId r) { return uint64_t(uint32_t(l)) << 32 | uint32_t(r); }

  void encode_word(std::string_view word, std::vector<TokenId>& out) const {
    {
      std::lock_guard lock(cache_mutex_);
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<TokenId> ids = bpe(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (word.size() > kCacheWordMax) return;  // long pieces (rare) would only fill the cache
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheMax) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }

  // Byte-level BPE of one pre-tokenized piece.
  std::vector<TokenId> bpe(std::string_view word) const {
    const auto& bl = byte_level_map();
    if (ignore_merges_) {
      std::string spelled;
      for (char c : word) spelled += bl.byte_to_utf8[static_cast<uint8_t>(c)];
      if (TokenId id = find_token(spelled); id >= 0) return {id};
    }
    // Symbols in a doubly linked list, one per byte. A byte without a token (SmolLM2 lacks 0x04,
    // 0xFF and others) is dropped before merging, as Hugging Face's BPE without an unk token does:
    // its neighbours may merge across it.
    struct Symbol {
      TokenId id;
      int prev, next;
    };
    std::vector<Symbol> sym;
    sym.reserve(word.size());
    for (char c : word) {
      const TokenId id = byte_token_[static_cast<uint8_t>(c)];
      if (id >= 0) sym.push_back({id, int(sym.size()) - 1, int(sym.size()) + 1});
    }
    if (sym.empty()) return {};
    sym.back().next = -1;
    struct Candidate {
      int32_t rank;
      int left;
      TokenId l, r, merged;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto consider = [&](int left) {
      if (left < 0 || sym[size_t(left)].next < 0) return;
      const Symbol& a = sym[size_t(left)];
      const Symbol& b = sym[size_t(a.next)];
      auto it = merges_.find(pair_key(a.id, b.id));
      if (it != merges_.end()) queue.push({it->second.rank, left, a.id, b.id, it->second.merged});
    };
    for (int i = 0; i + 1 < int(sym.size()); ++i) consider(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& a = sym[size_t(c.left)];
      if (a.id != c.l || a.next < 0 || sym[size_t(a.next)].id != c.r) continue;  // stale
      const int right = a.next;
      a.id = c.merged;
      a.next = sym[size_t(right)].next;
      if (a.next >= 0) sym[size_t(a.next)].prev = c.left;
      sym[size_t(right)].id = -2;  // removed
      consider(a.prev);
      consider(c.left);
    }
    std::vector<TokenId> ids;
    for (int i = 0; i >= 0; i = sym[size_t(i)].next) ids.push_back(sym[size_t(i)].id);
    return ids;
  }

  static constexpr size_t kCacheMax = 1 << 18;
  static constexpr size_t kCacheWordMax = 256;  // bytes: the cache holds at most 64 MiB of pieces
  struct StringHash {  // lets the cache be searched with a string_view
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::vector<std::string> tokens_;
  std::vector<int32_t> types_;
  std::vector<std::string> pieces_;  // decoded bytes per token
  std::vector<std::unique_ptr<Regex>> regexes_;
  bool ignore_merges_ = false;
  std::array<TokenId, 256> byte_token_{};
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, result
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> cache_;  // piece bytes -> ids
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& gguf) { return std::make_unique<BpeTokenizer>(gguf); }

}  // namespace ragkv
