// Fuzz target: GGUF model files (core/format/gguf.*), untrusted input — several llama.cpp advisories
// were GGUF parsing overflows. The bytes are written to a file and go the way a model file goes:
// the parser, every metadata getter, the hyper-parameters (core/model/model-config.*), the tokenizer
// built from the vocabulary, and the model loader's shape checks on the CPU backend; a model that
// loads and is tiny runs a prompt and a decode step. Seeds: `ragkv make-test-model` files and edits of them
// (fuzz/make-seeds.sh).
#include <cstdint>
#include <string>

#include "core/backend/cpu-backend.h"
#include "core/format/gguf.h"
#include "fuzz/fuzz-common.h"
#include "core/model/model-config.h"
#include "core/model/model.h"
#include "core/model/tokenizer.h"

using namespace ragkv;

namespace {

// Every getter of the value's own type, and the one of another type (which must throw).
void read_metadata(const GgufFile& g) {
  for (const auto& entry : g.metadata()) {
    const std::string& key = entry.first;  // (not a structured binding: clang 14 cannot capture one)
    const GgufValue& v = entry.second;
    switch (v.type) {
      case GgufType::string: g.get_string(key); break;
      case GgufType::f32: case GgufType::f64: g.get_float(key); break;
      case GgufType::boolean: g.get_bool(key); break;
      case GgufType::array:
        if (v.elem_type == GgufType::string) g.get_string_array(key);
        else if (v.elem_type == GgufType::f32 || v.elem_type == GgufType::f64) g.get_float_array(key);
        else g.get_int_array(key);
        break;
      default: g.get_int(key); g.get_float(key); break;
    }
    if (v.type != GgufType::string) fuzz::expect_ok_or_error(g.path(), [&] { g.get_string(key); });
  }
  for (const GgufTensor& t : g.tensors()) {
    RAGKV_FUZZ_CHECK(t.data >= reinterpret_cast<const uint8_t*>(g.header_bytes().data()) &&
                         t.nbytes <= g.file_size() && t.data + t.nbytes <=
                         reinterpret_cast<const uint8_t*>(g.header_bytes().data()) + g.file_size(),
                     "tensor '{}' lies outside the file", t.name);
    t.shape_str();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.gguf", {reinterpret_cast<const char*>(data), size}).string();
  std::unique_ptr<GgufFile> g;
  if (!fuzz::expect_ok_or_error(path, [&] { g = std::make_unique<GgufFile>(path); })) return 0;
  fuzz::expect_ok_or_error(path, [&] { read_metadata(*g); });
  fuzz::expect_ok_or_error(path, [&] { ModelConfig::from_gguf(*g); });
  fuzz::expect_ok_or_error(path, [&] {
    if (g->has("tokenizer.ggml.tokens")) tokenizer_fingerprint(*g);
    const auto tok = Tokenizer::from_gguf(*g);
    const auto ids = tok->encode("Hello world, <|im_start|> 12345 \xF0\x9F\x98\x80!", true);
    for (const TokenId id : ids) RAGKV_FUZZ_CHECK(id >= 0 && id < tok->vocab_size(), "token id {} out of range", id);
    tok->decode(ids);
  });

  static const std::unique_ptr<Backend> backend = make_cpu_backend(1);
  fuzz::expect_ok_or_error(path, [&] {
    const Model model(path, *backend);
    const ModelConfig& c = model.config();
    // One forward step on a tiny model only: the loader is what is fuzzed, and big shapes are slow.
    if (int64_t(c.n_layer) * (int64_t(c.n_embd) * (c.q_dim() + 2 * c.kv_dim() + 3 * c.n_ff)) > (1 << 20) ||
        int64_t(c.n_vocab) * c.n_embd > (1 << 20))
      return;
    KvCache kv = model.new_kv_cache(4);
    Workspace ws;
    const int32_t ids[2] = {0, int32_t(c.n_vocab - 1)};
    const std::vector<float> logits = model.forward(ids, kv, ws);
    RAGKV_FUZZ_CHECK(logits.size() == size_t(c.n_vocab), "{} logits for {} tokens", logits.size(), c.n_vocab);
    // A decode step too: its products quantise the activations (backend.h, Activations::block8).
    KvCache* kvs[1] = {&kv};
    const int32_t next[1] = {int32_t(c.n_vocab / 2)};
    const std::vector<float> step = model.decode_step(next, kvs, ws);
    RAGKV_FUZZ_CHECK(step.size() == size_t(c.n_vocab), "{} logits for {} tokens", step.size(), c.n_vocab);
  });
  return 0;
}
