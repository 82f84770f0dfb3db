// Fuzz target: the embedder's WordPiece tokenizer (core/model/wordpiece.*) over all-MiniLM-L6-v2's
// vocabulary. Any bytes must give [CLS] ids [SEP], at most max_seq_length ids, each inside the
// vocabulary, and encode's pieces must be tokenize's, cut.
#include <algorithm>
#include <cstdint>
#include <string>

#include "fuzz/fuzz-common.h"
#include "core/model/wordpiece.h"

using namespace ragkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const WordPieceTokenizer tok = WordPieceTokenizer::load(fuzz::model_file("all-MiniLM-L6-v2"));
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.encode(text);
  const std::vector<int32_t> pieces = tok.tokenize(text);
  RAGKV_FUZZ_CHECK(ids.size() >= 2 && ids.size() <= size_t(tok.config().max_seq_length), "{} ids", ids.size());
  RAGKV_FUZZ_CHECK(ids.front() == tok.cls_id() && ids.back() == tok.sep_id(), "not [CLS] ... [SEP]");
  RAGKV_FUZZ_CHECK(ids.size() - 2 == std::min(pieces.size(), size_t(tok.config().max_seq_length) - 2) &&
                       std::equal(ids.begin() + 1, ids.end() - 1, pieces.begin()),
                   "encode's {} ids are not tokenize's {} pieces, cut", ids.size(), pieces.size());
  for (const int32_t id : pieces) RAGKV_FUZZ_CHECK(id >= 0 && size_t(id) < tok.vocab_size(), "id {} out of range", id);
  tok.basic_tokenize(text);
  return 0;
}
