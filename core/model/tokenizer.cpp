// Tokenizer base: decoding, special ids from GGUF metadata, the special-token matcher shared by
// both tokenizers, and the dispatch on tokenizer.ggml.model.
#include "core/model/tokenizer.h"

#include <algorithm>
#include <array>
#include <bitset>

#include <fmt/format.h>

#include "core/format/checksum.h"
#include "core/util/error.h"
#include "core/format/gguf.h"

namespace ragkv {

// Texts of control and user-defined tokens, looked up by (first byte, length) so that a position
// costs nothing unless its first two bytes start some special token.
struct Tokenizer::SpecialMatcher {
  struct Entry {
    TokenId id;
    bool control;  // matched only with parse_special
  };
  std::vector<std::string> texts;                               // owns the keys of by_text
  std::unordered_map<std::string_view, Entry> by_text;
  std::array<std::vector<uint32_t>, 256> lengths;               // by first byte, longest first
  std::bitset<65536> prefix2;                                   // first two bytes of texts (len >= 2)
  std::bitset<256> single;                                      // one-byte texts
};

void Tokenizer::init_vocab(const std::vector<std::string>& tokens, const std::vector<int32_t>& types) {
  token_ids_.clear();
  token_ids_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) token_ids_.emplace(tokens[i], TokenId(i));

  auto m = std::make_shared<SpecialMatcher>();
  std::vector<std::pair<size_t, bool>> picked;  // token index, control
  for (size_t i = 0; i < tokens.size() && i < types.size(); ++i) {
    if ((types[i] == 3 || types[i] == 4) && !tokens[i].empty() && token_ids_.at(tokens[i]) == TokenId(i))
      picked.emplace_back(i, types[i] == 3);
  }
  m->texts.reserve(picked.size());  // no reallocation below: by_text keys point into texts
  for (const auto& [i, control] : picked) {
    m->texts.push_back(tokens[i]);
    const std::string& t = m->texts.back();
    m->by_text.emplace(std::string_view(t), SpecialMatcher::Entry{TokenId(i), control});
    const auto b0 = static_cast<uint8_t>(t[0]);
    m->lengths[b0].push_back(uint32_t(t.size()));
    if (t.size() == 1)
      m->single.set(b0);
    else
      m->prefix2.set(size_t(b0) << 8 | static_cast<uint8_t>(t[1]));
  }
  for (auto& l : m->lengths) {
    std::sort(l.begin(), l.end(), std::greater<>());
    l.erase(std::unique(l.begin(), l.end()), l.end());
  }
  special_ = std::move(m);
}

std::vector<Tokenizer::Fragment> Tokenizer::split_special(std::string_view text, bool parse_special) const {
  std::vector<Fragment> out;
  if (!special_ || special_->by_text.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return out;
  }
  const SpecialMatcher& m = *special_;
  size_t start = 0;  // start of the pending raw text
  size_t pos = 0;
  while (pos < text.size()) {
    const auto b0 = static_cast<uint8_t>(text[pos]);
    const bool may2 = pos + 1 < text.size() && m.prefix2[size_t(b0) << 8 | static_cast<uint8_t>(text[pos + 1])];
    size_t matched = 0;
    TokenId id = -1;
    if (may2 || m.single[b0]) {
      for (uint32_t len : m.lengths[b0]) {  // longest first
        if (pos + len > text.size() || (len >= 2 && !may2)) continue;
        auto it = m.by_text.find(text.substr(pos, len));
        if (it == m.by_text.end() || (it->second.control && !parse_special)) continue;
        matched = len;
        id = it->second.id;
        break;
      }
    }
    if (matched == 0) {
      ++pos;
      continue;
    }
    if (pos > start) out.push_back({text.substr(start, pos - start), -1});
    out.push_back({text.substr(pos, matched), id});
    pos += matched;
    start = pos;
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
  return out;
}

std::vector<std::string_view> split_giant_runs(std::string_view s, size_t max_run) {
  std::vector<std::string_view> out;
  if (max_run < 4) max_run = 4;  // room for one whole UTF-8 character
  auto space = [](unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  size_t start = 0;  // start of the pending piece
  size_t run = 0;    // start of the current run (same whitespace class)
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > run && space(static_cast<unsigned char>(s[i])) != space(static_cast<unsigned char>(s[i - 1]))) run = i;
    if (i - run < max_run) continue;
    // The run reached max_run bytes: cut before the character that i falls in.
    size_t cut = i;
    while (cut > run && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    if (cut == run) continue;  // (max_run >= 4: never happens for valid UTF-8)
    out.push_back(s.substr(start, cut - start));
    start = run = cut;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids) const {
  std::string out;
  for (TokenId id : ids) out += token_to_piece(id);
  if (decode_strip_space_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

bool Tokenizer::is_eog(TokenId id) const {
  return std::find(eog_.begin(), eog_.end(), id) != eog_.end();
}

TokenId Tokenizer::find_token(std::string_view text) const {
  auto it = token_ids_.find(std::string(text));
  return it == token_ids_.end() ? -1 : it->second;
}

void Tokenizer::init_special_ids(const GgufFile& gguf) {
  const int32_t n = vocab_size();
  auto id_of = [&](const char* key) -> TokenId {
    const auto v = gguf.find_int(key);
    if (!v) return -1;
    if (*v < 0 || *v >= n) fail("{}: {} is {}, outside the vocabulary of {} tokens", gguf.path(), key, *v, n);
    return TokenId(*v);
  };
  bos_ = id_of("tokenizer.ggml.bos_token_id");
  eos_ = id_of("tokenizer.ggml.eos_token_id");
  // llama.cpp and Hugging Face add BOS to SentencePiece vocabularies that do not say otherwise.
  const bool spm = gguf.find_string("tokenizer.ggml.model").value_or("") == "llama";
  add_bos_ = gguf.find_bool("tokenizer.ggml.add_bos_token").value_or(spm) && bos_ >= 0;

  eog_.clear();
  auto add_eog = [&](TokenId id) {
    if (id >= 0 && !is_eog(id)) eog_.push_back(id);
  };
  add_eog(eos_);
  add_eog(id_of("tokenizer.ggml.eot_token_id"));
  for (const char* t : {"<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>"}) add_eog(find_token(t));
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& gguf) {
  const auto model = gguf.find_string("tokenizer.ggml.model");
  if (!model) fail("{}: no tokenizer (metadata key tokenizer.ggml.model is missing)", gguf.path());
  if (*model == "gpt2") return make_bpe_tokenizer(gguf);
  if (*model == "llama") return make_spm_tokenizer(gguf);
  fail("{}: tokenizer.ggml.model '{}' is not supported (expected 'gpt2' or 'llama')", gguf.path(), *model);
}

std::string tokenizer_fingerprint(const GgufFile& gguf) {
  Checksum64 h;
  const auto tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  for (const auto& t : tokens) h.update(t.data(), t.size() + 1);  // + the NUL: keeps boundaries
  if (gguf.has("tokenizer.ggml.merges"))
    for (const auto& m : gguf.get_string_array("tokenizer.ggml.merges")) h.update(m.data(), m.size() + 1);
  return fmt::format("{}/{}/{}/{}", gguf.get_string("tokenizer.ggml.model"),
                     gguf.find_string("tokenizer.ggml.pre").value_or("-"), tokens.size(), checksum_hex(h.digest()));
}

}  // namespace ragkv
