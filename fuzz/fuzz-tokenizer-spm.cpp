// Fuzz target: SentencePiece (core/model/tokenizer-spm.cpp, through the sentencepiece library) over
// Gemma 3's vocabulary, with and without special-token parsing. Any bytes must tokenize without
// an exception, to ids inside the vocabulary, and decode without one.
#include <cstdint>
#include <string>

#include "core/format/gguf.h"
#include "fuzz/fuzz-common.h"
#include "core/model/tokenizer.h"

using namespace ragkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const GgufFile gguf(fuzz::model_file("gemma-3-270m-q4_k_m.gguf").string());
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(gguf);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const bool special : {false, true}) {
    const std::vector<TokenId> ids = tok->encode(text, special);
    for (const TokenId id : ids) RAGKV_FUZZ_CHECK(id >= 0 && id < tok->vocab_size(), "token id {} out of range", id);
    tok->decode(ids);
  }
  return 0;
}
