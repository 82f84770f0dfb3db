// Fuzz target: the sentence embedder's model folder — model.safetensors (core/format/safetensors.*),
// config.json, vocab.txt, tokenizer_config.json and sentence_bert_config.json — as
// Embedder::load reads it (core/model/embedder.*, core/model/wordpiece.*), then one embedding. The input is
// the five files cut by fuzz-common.h's separator; an input without separators is the
// safetensors file alone, beside a tiny valid BERT's other files (fuzz/make-seeds.cpp writes the
// same tiny model as a seed).
#include <cmath>
#include <cstdint>
#include <string>

#include "core/backend/cpu-backend.h"
#include "core/format/safetensors.h"
#include "fuzz/fuzz-common.h"
#include "fuzz/tiny-bert.h"
#include "core/model/embedder.h"

using namespace ragkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto parts = fuzz::split_parts(input, 5);
  const bool whole = input.find(fuzz::kPartSeparator) == std::string_view::npos;
  const fuzz::TinyBert defaults = fuzz::tiny_bert();
  const auto dir = fuzz::scratch_dir() / "bert";
  std::filesystem::remove_all(dir);
  const auto st_path = fuzz::write_scratch("bert/model.safetensors", parts[0]).string();
  fuzz::write_scratch("bert/config.json", whole ? defaults.config : parts[1]);
  fuzz::write_scratch("bert/vocab.txt", whole ? defaults.vocab : parts[2]);
  if (!parts[3].empty() || whole) fuzz::write_scratch("bert/tokenizer_config.json", whole ? defaults.tokenizer_config : parts[3]);
  if (!parts[4].empty() || whole)
    fuzz::write_scratch("bert/sentence_bert_config.json", whole ? defaults.sentence_bert_config : parts[4]);

  fuzz::expect_ok_or_error(st_path, [&] {
    const SafetensorsFile st(st_path);
    for (const SafetensorsTensor& t : st.tensors()) {
      RAGKV_FUZZ_CHECK(t.nbytes == size_t(t.n_elements()) * safetensors_dtype_size(t.dtype),
                       "tensor '{}': {} bytes for {}", t.name, t.nbytes, t.shape_str());
      fuzz::expect_ok_or_error(st_path, [&] { st.weight_view(t.name, t.shape); });
    }
  });

  static const std::unique_ptr<Backend> backend = make_cpu_backend(1);
  fuzz::expect_ok_or_error(dir.string(), [&] {
    Embedder e;
    e.load(dir, *backend);
    // A big folder (the fuzzer grew the shapes) is not run: loading is what is fuzzed.
    const BertConfig& c = e.config();
    if (int64_t(c.n_layer) * c.n_embd * (4 * c.n_embd + 2 * c.n_ff) > (1 << 20)) return;
    const std::vector<float> v = e.embed({"Hello, world!", "", "[CLS] caf\xC3\xA9 \xE4\xB8\xAD"});
    RAGKV_FUZZ_CHECK(v.size() == 3 * size_t(e.dim()), "{} floats for 3 texts of dim {}", v.size(), e.dim());
  });
  return 0;
}
