// Text <-> token ids for the LLM, built from the vocabulary stored in a GGUF file.
// tokenizer.ggml.model "gpt2": byte-level BPE implemented here (tokenizer-bpe.cpp), with the
// pre-tokenizer regex that tokenizer.ggml.pre names, run by PCRE2.
// tokenizer.ggml.model "llama": SentencePiece through the sentencepiece library
// (tokenizer-spm.cpp), from a ModelProto built from the GGUF vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ragkv {

class GgufFile;

using TokenId = int32_t;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Tokenize text. With parse_special, occurrences of control token texts (e.g. "<|im_start|>",
  // "<start_of_turn>") become their ids; otherwise they are plain text. User-defined tokens
  // (Gemma's "\n\n", "<b>") are always matched whole, as Hugging Face and llama.cpp do.
  // Never adds BOS/EOS: callers add bos_id() where the model wants it (add_bos()).
  virtual std::vector<TokenId> encode(std::string_view text, bool parse_special) const = 0;
  // Bytes of one token as it contributes to the output text (byte-level BPE bytes mapped back,
  // SentencePiece "▁" to space, byte tokens <0xNN> to the byte). Control tokens render as "".
  virtual std::string token_to_piece(TokenId id) const = 0;
  std::string decode(const std::vector<TokenId>& ids) const;

  virtual int32_t vocab_size() const = 0;
  TokenId bos_id() const { return bos_; }
  TokenId eos_id() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  // End-of-generation tokens: eos plus the chat end-of-turn token where the vocab has one
  // ("<|im_end|>", "<end_of_turn>", "<|eot_id|>").
  const std::vector<TokenId>& eog_ids() const { return eog_; }
  bool is_eog(TokenId id) const;
  // The raw vocabulary string of a token (as stored in the GGUF), -1 if absent.
  virtual const std::string& token_text(TokenId id) const = 0;
  TokenId find_token(std::string_view text) const;

  // Builds the tokenizer tokenizer.ggml.model names; throws for other models.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& gguf);

 protected:
  TokenId bos_ = -1, eos_ = -1;
  bool add_bos_ = false;
  std::vector<TokenId> eog_;
  void init_special_ids(const GgufFile& gguf);  // bos/eos/add_bos/eog from metadata

  // A stretch of the input: raw text for the model's tokenizer, or one special token.
  struct Fragment {
    std::string_view text;
    TokenId special = -1;  // >= 0: the whole fragment is this token
  };
  struct SpecialMatcher;  // core/model/tokenizer.cpp
  std::shared_ptr<const SpecialMatcher> special_;
  std::unordered_map<std::string, TokenId> token_ids_;  // vocabulary text -> id (first wins)
  bool decode_strip_space_ = false;  // decode() drops the space a SentencePiece prefix added

  // Fills token_ids_ and the special-token matcher from the GGUF vocabulary (types as GGUF
  // tokenizer.ggml.token_type: 3 control, 4 user-defined are the special ones).
  void init_vocab(const std::vector<std::string>& tokens, const std::vector<int32_t>& types);
  // Cuts text at special-token texts, leftmost-longest as Hugging Face's added tokens: control
  // tokens only with parse_special, user-defined ones always (as HF and llama.cpp do).
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;
};

// Identifies a GGUF's tokenizer: model kind, pre-tokenizer and a checksum of the vocabulary
// (and merges), e.g. "gpt2/smollm/49152/1f0c...". Recorded in indexes built with it.
std::string tokenizer_fingerprint(const GgufFile& gguf);

// Bounded work on hostile text (a megabyte of '[' or of spaces): every run of non-whitespace or
// of whitespace longer than kMaxRunBytes is cut into pieces of at most that many bytes (on UTF-8
// character boundaries) before a tokenizer merges it, so merging costs O(log kMaxRunBytes) per
// byte whatever the input. This is what production tokenizers do: Meta's Llama 3 tokenizer splits
// its input into stretches of at most 25,000 consecutive whitespace or non-whitespace characters
// before tiktoken's BPE (MAX_NO_WHITESPACES_CHARS). No natural text has such a run (a word, a
// URL, a base64 line are far shorter), so normal text tokenizes exactly as without the cap.
constexpr size_t kMaxRunBytes = 25000;
// The pieces of s, in order, concatenating to s: s itself when no run exceeds max_run.
std::vector<std::string_view> split_giant_runs(std::string_view s, size_t max_run = kMaxRunBytes);

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& gguf);
std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& gguf);

}  // namespace ragkv
