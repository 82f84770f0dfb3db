// BERT WordPiece tokenizer (DESIGN.md §3, §5), as Hugging Face's fast BertTokenizer runs it for
// sentence-transformers:
//   special tokens ([CLS], [SEP], [PAD], [UNK], [MASK]) written in the raw text are matched first
//   and map to their ids; the text between them goes through
//   1. the basic tokenizer (BertNormalizer + BertPreTokenizer): control characters removed,
//      whitespace turned into spaces, spaces put around CJK ideographs, accents stripped (NFD,
//      nonspacing marks dropped) and lower-casing when do_lower_case (strip_accents defaults to
//      do_lower_case), then split on spaces with every punctuation character a word of its own;
//   2. WordPiece: per word, greedy longest match from the left, continuation pieces prefixed
//      "##"; a word longer than 100 characters, or one the vocabulary cannot spell, is [UNK];
//   3. [CLS] ids [SEP], the ids cut so the whole is at most max_seq_length.
// The Unicode classes come from tables measured on the reference (wordpiece-unicode.inc,
// scripts/make_wordpiece_tables.py). Invalid UTF-8 decodes to U+FFFD, which cleaning removes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ragkv {

class WordPieceTokenizer {
 public:
  // Options of the basic tokenizer (tokenizer_config.json) and the sequence limit.
  struct Config {
    bool do_lower_case = true;
    bool strip_accents = true;          // tokenizer_config "strip_accents" (null: do_lower_case)
    bool tokenize_chinese_chars = true;
    int max_input_chars_per_word = 100;
    int max_seq_length = 512;           // [CLS] + pieces + [SEP]
    std::string unk = "[UNK]", cls = "[CLS]", sep = "[SEP]", pad = "[PAD]", mask = "[MASK]";
  };

  // From a Hugging Face / sentence-transformers model folder: vocab.txt (one token per line, the
  // id is the line number), tokenizer_config.json (optional: do_lower_case, strip_accents,
  // tokenize_chinese_chars, special token names, model_max_length) and
  // sentence_bert_config.json (optional: max_seq_length, which wins over model_max_length).
  // Errors name the file.
  static WordPieceTokenizer load(const std::filesystem::path& dir);
  // From a vocabulary (token of each id) and a config; the special tokens must be in it.
  WordPieceTokenizer(std::vector<std::string> vocab, Config config);

  // [CLS] pieces [SEP], at most max_seq_length ids (pieces cut at the end).
  std::vector<int32_t> encode(std::string_view text) const;
  // The pieces alone: no [CLS]/[SEP], no truncation.
  std::vector<int32_t> tokenize(std::string_view text) const;
  // The basic tokenizer's words of a text without special tokens (for tests and debugging).
  std::vector<std::string> basic_tokenize(std::string_view text) const;

  const Config& config() const { return config_; }
  size_t vocab_size() const { return vocab_.size(); }
  const std::string& token(int32_t id) const;  // throws for an id outside the vocabulary
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  Config config_;
  std::vector<std::string> vocab_;                                      // [id] → token
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;  // token → id
  std::vector<std::pair<std::string, int32_t>> specials_;               // matched in raw text
  int32_t cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, unk_id_ = -1;
  size_t max_token_bytes_ = 0;  // longest vocabulary entry, bounds the greedy match

  int32_t required_id(const std::string& token, const char* role) const;
  // Basic tokenizer + WordPiece over text free of special tokens, appending to out.
  void tokenize_plain(std::string_view text, std::vector<int32_t>& out) const;
  void word_pieces(std::string_view word, size_t n_chars, std::vector<int32_t>& out) const;
  // Normalised text split into words (code points), as the pre-tokenizer leaves it.
  std::vector<std::u32string> words(std::string_view text) const;
};

}  // namespace ragkv
