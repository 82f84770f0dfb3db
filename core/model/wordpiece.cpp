// BERT WordPiece tokenizer: special-token split, basic tokenizer over Unicode tables measured on
// the reference, greedy longest-match WordPiece, [CLS]/[SEP] and truncation. See wordpiece.h.
#include "core/model/wordpiece.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace ragkv {

namespace {

struct Range {
  char32_t lo, hi;  // inclusive
};
struct Mapping {
  char32_t cp;
  uint8_t n;          // code points in out
  char32_t out[4];
};

#include "core/model/wordpiece-unicode.inc"

bool in_ranges(std::span<const Range> rs, char32_t c) {
  // First range whose hi ≥ c; c is inside when that range starts at or before c.
  const auto it =
      std::lower_bound(rs.begin(), rs.end(), c, [](const Range& r, char32_t v) { return r.hi < v; });
  return it != rs.end() && it->lo <= c;
}

const Mapping* find_mapping(std::span<const Mapping> ms, char32_t c) {
  const auto it =
      std::lower_bound(ms.begin(), ms.end(), c, [](const Mapping& m, char32_t v) { return m.cp < v; });
  return it != ms.end() && it->cp == c ? &*it : nullptr;
}

// Hangul syllables decompose algorithmically under NFD (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kVCount = 21, kTCount = 28, kSCount = 19 * kVCount * kTCount;

// Character classes of the basic tokenizer, with an ASCII fast path.
enum class CharClass : uint8_t { plain, removed, space, punctuation };

CharClass classify_slow(char32_t c) {
  if (in_ranges(kRemoved, c)) return CharClass::removed;
  if (c == U' ' || in_ranges(kWhitespace, c)) return CharClass::space;
  if (in_ranges(kPunctuation, c)) return CharClass::punctuation;
  return CharClass::plain;
}

const std::array<CharClass, 128>& ascii_classes() {
  static const std::array<CharClass, 128> table = [] {
    std::array<CharClass, 128> t{};
    for (char32_t c = 0; c < 128; ++c) t[c] = classify_slow(c);
    return t;
  }();
  return table;
}

CharClass classify(char32_t c) { return c < 128 ? ascii_classes()[c] : classify_slow(c); }

// UTF-8 → code points; each invalid or truncated sequence becomes one U+FFFD.
std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      out += char32_t(b0);
      ++i;
      continue;
    }
    int n = 0;
    char32_t c = 0, min = 0;
    if ((b0 & 0xE0) == 0xC0) n = 1, c = b0 & 0x1F, min = 0x80;
    else if ((b0 & 0xF0) == 0xE0) n = 2, c = b0 & 0x0F, min = 0x800;
    else if ((b0 & 0xF8) == 0xF0) n = 3, c = b0 & 0x07, min = 0x10000;
    bool ok = n > 0 && i + size_t(n) < s.size();  // the n continuation bytes exist
    for (int k = 1; ok && k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((b & 0xC0) != 0x80) ok = false;
      else c = (c << 6) | (b & 0x3F);
    }
    if (ok && (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))) ok = false;
    if (ok) {
      out += c;
      i += size_t(n) + 1;
    } else {
      out += char32_t(0xFFFD);
      ++i;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

std::string to_utf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char32_t c : s) append_utf8(out, c);
  return out;
}

void append_lower(std::u32string& out, char32_t c) {
  if (c < 128) {
    out += (c >= U'A' && c <= U'Z') ? c + 32 : c;
  } else if (const Mapping* m = find_mapping(kLowerMap, c)) {
    out.append(m->out, m->n);
  } else {
    out += c;
  }
}

// A special token of tokenizer_config.json: a string or {"content": string, ...}.
void read_token_name(const nlohmann::json& cfg, const char* key, std::string& out,
                     const std::filesystem::path& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return;
  const auto& v = cfg[key];
  if (v.is_string()) out = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string())
    out = v["content"].get<std::string>();
  else fail("{}: '{}' is neither a string nor an object with a \"content\" string", path.string(), key);
}

bool read_bool(const nlohmann::json& cfg, const char* key, bool dflt, const std::filesystem::path& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return dflt;
  if (!cfg[key].is_boolean()) fail("{}: '{}' must be true, false or null", path.string(), key);
  return cfg[key].get<bool>();
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::load(const std::filesystem::path& dir) {
  Config cfg;
  const auto vocab_path = dir / "vocab.txt";
  if (!std::filesystem::exists(vocab_path))
    fail("{}: not found (a BERT model folder needs its WordPiece vocabulary)", vocab_path.string());
  std::vector<std::string> vocab;
  const std::string text = read_file(vocab_path);
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string tok = text.substr(pos, nl - pos);
    if (!tok.empty() && tok.back() == '\r') tok.pop_back();
    vocab.push_back(std::move(tok));
    pos = nl + 1;
  }
  if (vocab.empty()) fail("{}: empty vocabulary", vocab_path.string());

  const auto tc_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(tc_path)) {
    const nlohmann::json tc = read_json_file(tc_path);
    if (!tc.is_object()) fail("{}: expected a JSON object", tc_path.string());
    cfg.do_lower_case = read_bool(tc, "do_lower_case", true, tc_path);
    cfg.strip_accents = read_bool(tc, "strip_accents", cfg.do_lower_case, tc_path);
    cfg.tokenize_chinese_chars = read_bool(tc, "tokenize_chinese_chars", true, tc_path);
    read_token_name(tc, "unk_token", cfg.unk, tc_path);
    read_token_name(tc, "cls_token", cfg.cls, tc_path);
    read_token_name(tc, "sep_token", cfg.sep, tc_path);
    read_token_name(tc, "pad_token", cfg.pad, tc_path);
    read_token_name(tc, "mask_token", cfg.mask, tc_path);
    if (tc.contains("model_max_length") && tc["model_max_length"].is_number_integer()) {
      const int64_t m = tc["model_max_length"].get<int64_t>();
      if (m >= 2 && m <= (int64_t(1) << 20)) cfg.max_seq_length = int(m);  // HF writes 1e30 for "none"
    }
  }
  const auto st_path = dir / "sentence_bert_config.json";
  if (std::filesystem::exists(st_path)) {
    const nlohmann::json st = read_json_file(st_path);
    if (!st.is_object()) fail("{}: expected a JSON object", st_path.string());
    if (st.contains("max_seq_length")) {
      if (!st["max_seq_length"].is_number_integer() || st["max_seq_length"].get<int64_t>() < 2 ||
          st["max_seq_length"].get<int64_t>() > (int64_t(1) << 20))
        fail("{}: max_seq_length must be an integer ≥ 2, got {}", st_path.string(),
             st["max_seq_length"].dump());
      cfg.max_seq_length = int(st["max_seq_length"].get<int64_t>());
    }
    // sentence-transformers lower-cases the input itself when this is set; ragkv does not.
    if (read_bool(st, "do_lower_case", false, st_path) && !cfg.do_lower_case)
      fail("{}: do_lower_case without a lower-casing tokenizer is not supported", st_path.string());
  }
  try {
    return WordPieceTokenizer(std::move(vocab), cfg);
  } catch (const Error& e) {
    fail("{}: {}", vocab_path.string(), e.what());
  }
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, Config config)
    : config_(std::move(config)), vocab_(std::move(vocab)) {
  if (vocab_.size() > size_t(INT32_MAX)) fail("vocabulary of {} tokens is too large", vocab_.size());
  if (config_.max_seq_length < 2)
    fail("max_seq_length {} leaves no room for [CLS] and [SEP]", config_.max_seq_length);
  ids_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i) {
    ids_[vocab_[i]] = int32_t(i);  // a repeated token keeps its last id, as Hugging Face's loader
    max_token_bytes_ = std::max(max_token_bytes_, vocab_[i].size());
  }
  unk_id_ = required_id(config_.unk, "unknown");
  cls_id_ = required_id(config_.cls, "classifier");
  sep_id_ = required_id(config_.sep, "separator");
  pad_id_ = required_id(config_.pad, "padding");
  for (const std::string* s : {&config_.unk, &config_.cls, &config_.sep, &config_.pad, &config_.mask})
    if (const auto it = ids_.find(*s); !s->empty() && it != ids_.end()) specials_.emplace_back(*s, it->second);
}

int32_t WordPieceTokenizer::required_id(const std::string& token, const char* role) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) fail("the {} token '{}' is not in the vocabulary", role, token);
  return it->second;
}

const std::string& WordPieceTokenizer::token(int32_t id) const {
  if (id < 0 || size_t(id) >= vocab_.size())
    fail("token id {} is outside the vocabulary of {} tokens", id, vocab_.size());
  return vocab_[size_t(id)];
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids{cls_id_};
  // Pieces past the limit are cut (Hugging Face truncation of a single sequence).
  std::vector<int32_t> pieces = tokenize(text);
  const size_t keep = std::min(pieces.size(), size_t(config_.max_seq_length) - 2);
  ids.insert(ids.end(), pieces.begin(), pieces.begin() + ptrdiff_t(keep));
  ids.push_back(sep_id_);
  return ids;
}

std::vector<int32_t> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<int32_t> out;
  // Special tokens in the raw text (Hugging Face added tokens, not normalised): the earliest
  // occurrence wins, the longest on a tie.
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string_view::npos, best_len = 0;
    int32_t best_id = -1;
    for (const auto& [s, id] : specials_) {
      const size_t at = text.find(s, pos);
      if (at != std::string_view::npos && (at < best || (at == best && s.size() > best_len))) {
        best = at;
        best_len = s.size();
        best_id = id;
      }
    }
    if (best == std::string_view::npos) {
      tokenize_plain(text.substr(pos), out);
      break;
    }
    tokenize_plain(text.substr(pos, best - pos), out);
    out.push_back(best_id);
    pos = best + best_len;
  }
  return out;
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (const auto& w : words(text)) out.push_back(to_utf8(w));
  return out;
}

std::vector<std::u32string> WordPieceTokenizer::words(std::string_view text) const {
  // 1. Clean (BertNormalizer clean_text) and pad CJK ideographs with spaces.
  const std::u32string in = decode_utf8(text);
  std::u32string s;
  s.reserve(in.size());
  for (const char32_t c : in) {
    const CharClass k = classify(c);
    if (k == CharClass::removed) continue;
    if (k == CharClass::space) {
      s += U' ';
    } else if (config_.tokenize_chinese_chars && c >= 0x3400 && in_ranges(kChinese, c)) {
      s += U' ';
      s += c;
      s += U' ';
    } else {
      s += c;
    }
  }
  // 2. Strip accents: NFD, then drop nonspacing marks.
  if (config_.strip_accents) {
    std::u32string t;
    t.reserve(s.size());
    for (const char32_t c : s) {
      if (c < 0x80) {
        t += c;
      } else if (c >= kSBase && c < kSBase + kSCount) {
        const char32_t i = c - kSBase;
        t += kLBase + i / (kVCount * kTCount);
        t += kVBase + (i % (kVCount * kTCount)) / kTCount;
        if (i % kTCount) t += kTBase + i % kTCount;
      } else if (in_ranges(kStripRemoved, c)) {
        continue;
      } else if (const Mapping* m = find_mapping(kStripMap, c)) {
        t.append(m->out, m->n);
      } else {
        t += c;
      }
    }
    s = std::move(t);
  }
  // 3. Lower-case.
  if (config_.do_lower_case) {
    std::u32string t;
    t.reserve(s.size());
    for (const char32_t c : s) append_lower(t, c);
    s = std::move(t);
  }
  // 4. Pre-tokenize: split on spaces, every punctuation character a word of its own.
  std::vector<std::u32string> out;
  std::u32string cur;
  for (const char32_t c : s) {
    const CharClass k = classify(c);
    if (k == CharClass::space || k == CharClass::punctuation) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
      if (k == CharClass::punctuation) out.emplace_back(1, c);
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

void WordPieceTokenizer::tokenize_plain(std::string_view text, std::vector<int32_t>& out) const {
  for (const auto& w : words(text)) word_pieces(to_utf8(w), w.size(), out);
}

// Greedy longest match from the left (BERT WordPiece): the longest vocabulary entry that prefixes
// the rest of the word, "##"-prefixed after the first piece; a word it cannot spell is [UNK].
void WordPieceTokenizer::word_pieces(std::string_view word, size_t n_chars, std::vector<int32_t>& out) const {
  if (n_chars > size_t(config_.max_input_chars_per_word)) {
    out.push_back(unk_id_);
    return;
  }
  const size_t first = out.size();
  std::string buf;
  size_t start = 0;
  auto is_cont = [&](size_t i) { return (static_cast<unsigned char>(word[i]) & 0xC0) == 0x80; };
  while (start < word.size()) {
    const size_t prefix = start > 0 ? 2 : 0;
    if (max_token_bytes_ <= prefix) break;
    size_t end = std::min(word.size(), start + (max_token_bytes_ - prefix));
    while (end > start && end < word.size() && is_cont(end)) --end;  // a character boundary
    int32_t id = -1;
    while (end > start) {
      buf.assign(start > 0 ? "##" : "");
      buf.append(word.substr(start, end - start));
      if (const auto it = ids_.find(std::string_view(buf)); it != ids_.end()) {
        id = it->second;
        break;
      }
      do --end;
      while (end > start && is_cont(end));
    }
    if (id < 0) {
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(id);
    start = end;
  }
  if (start < word.size()) {  // no vocabulary entry is long enough to continue
    out.resize(first);
    out.push_back(unk_id_);
  }
}

}  // namespace ragkv
