// Fuzz target: GPT-2 byte-level BPE (core/model/tokenizer-bpe.cpp) over SmolLM2's vocabulary and
// merges, with and without special-token parsing. Any bytes must tokenize without an exception,
// to ids inside the vocabulary; printable ASCII text (every byte has a token) must decode back to
// itself when special tokens are not parsed.
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/format/gguf.h"
#include "fuzz/fuzz-common.h"
#include "core/model/tokenizer.h"

using namespace ragkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const GgufFile gguf(fuzz::model_file("SmolLM2-135M-Instruct.Q4_1.gguf").string());
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(gguf);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const bool special : {false, true}) {
    const std::vector<TokenId> ids = tok->encode(text, special);
    for (const TokenId id : ids) RAGKV_FUZZ_CHECK(id >= 0 && id < tok->vocab_size(), "token id {} out of range", id);
    const std::string back = tok->decode(ids);
    const bool ascii = std::all_of(text.begin(), text.end(), [](char c) { return (c >= 0x20 && c < 0x7F) || c == '\n'; });
    if (!special && ascii) RAGKV_FUZZ_CHECK(back == text, "decode(encode(text)) differs: '{}' -> '{}'", text, back);
  }
  return 0;
}
