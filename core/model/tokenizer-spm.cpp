// SentencePiece vocabularies (tokenizer.ggml.model "llama"): the GGUF vocabulary is written out as
// a sentencepiece ModelProto (wire format by hand, field numbers of sentencepiece_model.proto) and
// loaded into sentencepiece::SentencePieceProcessor, which does the BPE. Special tokens are cut out
// of the text first (Tokenizer::split_special), as Hugging Face does with its added tokens.
#include <sentencepiece_processor.h>

#include <cstring>
#include <set>
#include <unordered_set>

#include "core/util/error.h"
#include "core/util/utf8.h"
#include "core/format/gguf.h"
#include "core/model/tokenizer.h"

namespace ragkv {
namespace {

// GGUF token types (tokenizer.ggml.token_type) equal sentencepiece's ModelProto.SentencePiece.Type.
enum TokenType : int32_t {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// Protocol buffers wire format, the few encodings a ModelProto needs.
class ProtoWriter {
 public:
  void varint(int field, uint64_t v) {
    tag(field, 0);
    raw_varint(v);
  }
  void int32(int field, int32_t v) { varint(field, uint64_t(int64_t(v))); }  // negatives: 10 bytes
  void boolean(int field, bool v) { varint(field, v ? 1 : 0); }
  void f32(int field, float v) {
    tag(field, 5);
    char b[4];
    std::memcpy(b, &v, 4);  // little-endian hosts only, like the GGUF reader
    buf_.append(b, 4);
  }
  void bytes(int field, std::string_view v) {
    tag(field, 2);
    raw_varint(v.size());
    buf_.append(v);
  }
  const std::string& str() const { return buf_; }

 private:
  void tag(int field, int wire_type) { raw_varint(uint64_t(field) << 3 | uint64_t(wire_type)); }
  void raw_varint(uint64_t v) {
    while (v >= 0x80) {
      buf_ += char(0x80 | (v & 0x7F));
      v >>= 7;
    }
    buf_ += char(v);
  }
  std::string buf_;
};

// "<0x0A>" -> 10; -1 if not of that form.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[size_t(i)];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(const GgufFile& gguf) : path_(gguf.path()) {
    tokens_ = gguf.get_string_array("tokenizer.ggml.tokens");
    const size_t n = tokens_.size();
    if (n == 0 || n > size_t(INT32_MAX)) fail("{}: tokenizer.ggml.tokens has {} entries", gguf.path(), n);
    types_ = gguf.has("tokenizer.ggml.token_type") ? gguf.get_int_array("tokenizer.ggml.token_type")
                                                    : std::vector<int32_t>(n, kNormal);
    if (types_.size() != n)
      fail("{}: tokenizer.ggml.token_type has {} entries, expected {} (one per token)", gguf.path(), types_.size(), n);
    std::vector<float> scores;
    if (gguf.has("tokenizer.ggml.scores")) {
      scores = gguf.get_float_array("tokenizer.ggml.scores");
      if (scores.size() != n)
        fail("{}: tokenizer.ggml.scores has {} entries, expected {} (one per token)", gguf.path(), scores.size(), n);
    } else {
      for (size_t i = 0; i < n; ++i) scores.push_back(-float(i));  // earlier tokens merge first
    }
    // Pieces SentencePiece sees have their spaces escaped as "▁", so a user-defined token of
    // spaces (Gemma's "  " ... 31 spaces) is spelled "▁▁"... and merged like any piece, as Hugging
    // Face's GGUF conversion does (its gemma_tokenizer); cutting them out of the text upfront
    // would split a run of 40 spaces 31+9 where the reference has 16+24.
    std::vector<std::string> proto_pieces = tokens_;
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = tokens_[i];
      if (types_[i] != kUserDefined || t.find(' ') == std::string::npos ||
          t.find_first_not_of(" \t\n\r\v\f") != std::string::npos)
        continue;
      types_[i] = kNormal;
      proto_pieces[i].clear();
      for (char c : t) proto_pieces[i] += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    }
    init_vocab(tokens_, types_);
    // Their scores are placeholders (Gemma: -1000, like its control tokens), but their place in
    // the vocabulary is their merge priority. Where the normal tokens' scores fall strictly with
    // their index (Gemma, Llama 2), the index is the same order: use -index for every piece.
    bool index_order = true;
    float prev_score = 0;
    bool have_prev = false;
    for (size_t i = 0; i < n && index_order; ++i) {
      if (types_[i] != kNormal || proto_pieces[i] != tokens_[i]) continue;
      if (have_prev && !(scores[i] < prev_score)) index_order = false;
      prev_score = scores[i];
      have_prev = true;
    }
    if (index_order)
      for (size_t i = 0; i < n; ++i) scores[i] = -float(i);

    TokenId unk = TokenId(gguf.find_int("tokenizer.ggml.unknown_token_id").value_or(find_token("<unk>")));
    if (unk < 0 || size_t(unk) >= n)
      fail("{}: a SentencePiece vocabulary needs an unknown token (tokenizer.ggml.unknown_token_id or '<unk>')",
           gguf.path());
    for (size_t i = 0; i < n; ++i) {
      if (types_[i] == kByte) byte_value_.emplace(TokenId(i), byte_token_value(tokens_[i]));
    }
    std::set<int> bytes_present;
    for (const auto& [id, v] : byte_value_) bytes_present.insert(v);
    bytes_present.erase(-1);
    const bool byte_fallback = bytes_present.size() == 256;

    add_space_prefix_ = gguf.find_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    decode_strip_space_ = add_space_prefix_;
    const bool remove_extra_ws = gguf.find_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false);

    // ModelProto { pieces = 1; trainer_spec = 2; normalizer_spec = 3 }
    ProtoWriter model;
    std::unordered_set<std::string_view> seen;
    seen.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      int32_t type = types_[i];
      if (TokenId(i) == unk) type = kUnknown;
      else if (type == kUnknown || (type == kByte && (!byte_fallback || byte_value_.at(TokenId(i)) < 0))) type = kControl;
      else if (type < kNormal || type > kByte) type = kNormal;
      std::string placeholder;
      std::string_view piece = proto_pieces[i];
      // sentencepiece wants unique, non-empty pieces of valid UTF-8 (an invalid one made it fail
      // to encode text it had accepted the vocabulary for; found by fuzzing).
      if (piece.empty() || find_invalid_utf8(piece) != std::string_view::npos || !seen.insert(piece).second) {
        placeholder = fmt::format("<ragkv-placeholder-{}>", i);
        piece = placeholder;
        if (type != kUnknown) type = kControl;
      }
      ProtoWriter p;  // SentencePiece { piece = 1; score = 2; type = 3 }
      p.bytes(1, piece);
      p.f32(2, scores[i]);
      p.int32(3, type);
      model.bytes(1, p.str());
    }
    ProtoWriter trainer;  // TrainerSpec
    trainer.int32(3, 2);  // model_type = BPE
    trainer.int32(4, int32_t(n));  // vocab_size
    trainer.boolean(35, byte_fallback);
    trainer.int32(40, unk);
    trainer.int32(41, TokenId(gguf.find_int("tokenizer.ggml.bos_token_id").value_or(-1)));
    trainer.int32(42, TokenId(gguf.find_int("tokenizer.ggml.eos_token_id").value_or(-1)));
    trainer.int32(43, TokenId(gguf.find_int("tokenizer.ggml.padding_token_id").value_or(-1)));
    trainer.bytes(45, tokens_[size_t(unk)]);  // unk_piece
    model.bytes(2, trainer.str());
    ProtoWriter norm;  // NormalizerSpec
    norm.bytes(1, "identity");
    if (gguf.has("tokenizer.ggml.precompiled_charsmap")) {
      std::string charsmap;
      for (int32_t b : gguf.get_int_array("tokenizer.ggml.precompiled_charsmap")) charsmap += char(b);
      norm.bytes(2, charsmap);
    }
    norm.boolean(3, false);  // add_dummy_prefix: done here per fragment (add_space_prefix_)
    norm.boolean(4, remove_extra_ws);
    norm.boolean(5, true);  // escape_whitespaces: " " -> "▁"
    model.bytes(3, norm.str());

    const auto status = sp_.LoadFromSerializedProto(model.str());
    if (!status.ok())
      fail("{}: sentencepiece refused the vocabulary built from the GGUF: {}", gguf.path(), status.ToString());
    init_special_ids(gguf);
  }

  std::vector<TokenId> encode(std::string_view text, bool parse_special) const override {
    std::vector<TokenId> out;
    std::vector<int> ids;
    bool after_special = true;  // llama.cpp: the space prefix goes at the start and after specials
    std::string buf;
    for (const Fragment& f : split_special(text, parse_special)) {
      if (f.special >= 0) {
        out.push_back(f.special);
        after_special = true;
        continue;
      }
      // A fragment with a run longer than kMaxRunBytes is encoded in pieces (bounded work per
      // byte, tokenizer.h); the space prefix goes before the first only.
      for (std::string_view piece : split_giant_runs(f.text)) {
        if (add_space_prefix_ && after_special) {
          buf.clear();
          buf.push_back(' ');
          buf.append(piece);
          piece = buf;
        }
        after_special = false;
        const auto status = sp_.Encode(piece, &ids);
        // A vocabulary sentencepiece accepted can still fail on some text (found by fuzzing a
        // model file's vocabulary): the error names the model the vocabulary came from.
        if (!status.ok())
          fail("{}: sentencepiece failed to encode {} bytes of text with this model's vocabulary: {}", path_,
               piece.size(), status.ToString());
        out.insert(out.end(), ids.begin(), ids.end());
      }
    }
    return out;
  }

  std::string token_to_piece(TokenId id) const override {
    if (id < 0 || id >= vocab_size()) return {};
    const int32_t type = types_[size_t(id)];
    if (type == kControl) return {};
    if (type == kByte) {
      const int v = byte_value_.at(id);
      return v >= 0 ? std::string(1, char(v)) : std::string();
    }
    std::string out;
    const std::string& t = tokens_[size_t(id)];
    for (size_t i = 0; i < t.size();) {  // "▁" (U+2581) -> " "
      if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += t[i++];
      }
    }
    return out;
  }

  int32_t vocab_size() const override { return int32_t(tokens_.size()); }
  const std::string& token_text(TokenId id) const override {
    static const std::string none;
    return id >= 0 && id < vocab_size() ? tokens_[size_t(id)] : none;
  }

 private:
  std::string path_;  // the GGUF file, for errors
  std::vector<std::string> tokens_;
  std::vector<int32_t> types_;
  std::unordered_map<TokenId, int> byte_value_;  // byte tokens -> their byte (-1: malformed)
  bool add_space_prefix_ = true;
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& gguf) { return std::make_unique<SpmTokenizer>(gguf); }

}  // namespace ragkv
