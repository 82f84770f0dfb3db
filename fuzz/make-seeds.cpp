// fuzz-make-seeds CORPUS_DIR: writes the checked-in seed corpus of every fuzz target
// (CORPUS_DIR/<target>/<name>), small valid inputs made by ragkv's own writers and edits of them
// (truncated, bad magic, huge counts). fuzz/make-seeds.sh runs it after writing the GGUF seeds
// with `ragkv make-test-model`, whose files it also edits. Deterministic: the same build writes
// the same bytes.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/format/gguf-writer.h"
#include "fuzz/fuzz-common.h"
#include "fuzz/tiny-bert.h"
#include "core/kv/chunk-kv-file.h"
#include "retrieval/index-dir.h"
#include "core/util/file-io.h"

using namespace ragkv;
namespace fs = std::filesystem;

namespace {

fs::path g_out;

void seed(const std::string& target, const std::string& name, std::string_view bytes) {
  const fs::path p = g_out / target / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

template <typename T>
void poke(std::string& s, size_t at, T v) {
  if (at + sizeof(T) <= s.size()) std::memcpy(s.data() + at, &v, sizeof(T));
}

// Edits of a valid GGUF: cut short at several places, and header fields made absurd.
void gguf_edits(const std::string& name, const std::string& g) {
  for (const size_t cut : {size_t(10), size_t(24), size_t(64), g.size() / 2, g.size() - 1})
    if (cut < g.size()) seed("gguf", name + ".cut" + std::to_string(cut), g.substr(0, cut));
  std::string e = g;
  e[0] = 'X';
  seed("gguf", name + ".magic", e);
  e = g;
  poke<uint32_t>(e, 4, 1);
  seed("gguf", name + ".version1", e);
  e = g;
  poke<uint64_t>(e, 8, uint64_t(1) << 62);
  seed("gguf", name + ".tensors-huge", e);
  e = g;
  poke<uint64_t>(e, 16, uint64_t(1) << 62);
  seed("gguf", name + ".kv-huge", e);
  e = g;
  poke<uint64_t>(e, 24, ~uint64_t(0) - 7);
  seed("gguf", name + ".keylen-huge", e);
}

// A SentencePiece vocabulary ("llama" tokenizer model) with byte fallback, a user-defined token
// and a control token, on llama hyper-parameters: no tensors (the model loader refuses it, the
// tokenizer path runs).
std::string spm_gguf(const fs::path& tmp) {
  GgufWriter w;
  w.set("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.embedding_length", 8);
  w.set_u32("llama.feed_forward_length", 16);
  w.set_u32("llama.attention.head_count", 2);
  w.set_u32("llama.attention.head_count_kv", 1);
  w.set_u32("llama.context_length", 32);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  w.set("tokenizer.ggml.model", "llama");
  GgufWriter::StringArray tokens = {"<unk>", "<s>", "</s>", "<start_of_turn>", "  "};
  GgufWriter::IntArray types = {2, 3, 3, 4, 4};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  for (const char* p : {"\xE2\x96\x81", "\xE2\x96\x81the", "\xE2\x96\x81hello", "\xE2\x96\x81w", "orld", "h", "e", "l", "o",
                        "t", "w", "r", "d", "\xE2\x96\x81h", "he", "ll", "llo"}) {
    tokens.push_back(p);
    types.push_back(1);
  }
  GgufWriter::FloatArray scores;
  for (size_t i = 0; i < tokens.size(); ++i) scores.push_back(-float(i));
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.scores", scores);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  const fs::path p = tmp / "spm.gguf";
  w.write(p.string());
  return read_file(p);
}

// donor: a donor cache (core/rag/donor-reuse.h), its header naming the chunk it was built from.
std::string chunk_file(const fs::path& tmp, bool variant, bool chain, const KvEncoding& encoding = {}, bool donor = false) {
  ChunkKvMeta m;
  m.model_fingerprint = "fuzz-model:0123456789abcdef";
  m.chunk_id = "doc#0";
  m.prefix = "canonical:0123456789abcdef";
  m.n_layer = 2;
  m.n_kv_head = 1;
  m.head_dim = 4;
  m.n_tokens = 3;
  const int32_t ids[3] = {5, 6, 7};
  m.token_hash = token_ids_hash(ids);
  m.first_pos = 9;
  if (donor) m.donor = "doc#old@00000000000000ff";
  VariantStats stats;
  if (variant) {
    m.context = {"other#1", "third#0"};
    m.exact_chain = chain;
    stats.a_bar = 0.25f;
    stats.b_bar = 0.5f;
    stats.cci = 0.6f;
    stats.inter = {0.1f, 0.2f};
    stats.ranked = {2, 0, 1};
  }
  std::vector<uint16_t> kv(size_t(m.n_tokens) * m.kv_dim());
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = uint16_t(0x3C00 + i);  // f16 1.0 and up
  const uint16_t* layers[2] = {kv.data(), kv.data()};
  const fs::path p = tmp / "chunk.rkv";
  write_chunk_kv(p, m, layers, layers, variant && !chain ? &stats : nullptr, encoding);
  return read_file(p);
}

void chunk_kv_seeds(const fs::path& tmp) {
  const std::string canonical = chunk_file(tmp, false, false), variant = chunk_file(tmp, true, false),
                    chain = chunk_file(tmp, true, true);
  for (const uint8_t flags : {0, 1}) {
    const std::string f(1, char(flags));
    seed("chunk-kv", "canonical.flags" + std::to_string(flags), f + canonical);
    seed("chunk-kv", "variant.flags" + std::to_string(flags), f + variant);
    seed("chunk-kv", "chain.flags" + std::to_string(flags), f + chain);
  }
  // Compressed caches (file version 4, core/kv/kv-quant.h): 8- and 4-bit groups.
  const std::string q8 = chunk_file(tmp, false, false, KvEncoding::from_bits(8)),
                    q4_variant = chunk_file(tmp, true, false, KvEncoding::from_bits(4));
  seed("chunk-kv", "canonical.q8.flags1", std::string(1, '\1') + q8);
  seed("chunk-kv", "variant.q4.flags1", std::string(1, '\1') + q4_variant);
  seed("chunk-kv", "truncated", std::string(1, '\1') + canonical.substr(0, canonical.size() - 5));
  seed("chunk-kv", "donor.flags1", std::string(1, '\1') + chunk_file(tmp, false, false, {}, true));
  seed("chunk-kv", "donor.q8.flags1", std::string(1, '\1') + chunk_file(tmp, false, false, KvEncoding::from_bits(8), true));
  const std::string store_json = nlohmann::json{{"format", "ragkv-store"},
                                                {"format_version", 1},
                                                {"model_fingerprint", "fuzz-model:0123456789abcdef"},
                                                {"model_name", "fuzz.gguf"},
                                                {"n_layer", 2},
                                                {"n_kv_head", 1},
                                                {"head_dim", 4},
                                                {"dtype", "f16"},
                                                {"prefix", "canonical:0123456789abcdef"}}
                                     .dump(2);
  const std::string verified = "0123456789abcdef.rkv 134 1700000000000000000 42 1700000009000000000\nbad line\n";
  const std::string craft = R"({"format": "ragkv-craft-settings", "alpha": 0.35, "alpha_fit": null, "budget": {"max_variants": 4, "max_bytes": 0}})";
  const std::string usage = R"({"format": "ragkv-variant-usage", "frequency_reuse": {"0123456789abcdef.0123456789abcdef.rkv": 2.5}})";
  seed("chunk-kv", "store.canonical", std::string(1, '\3') + fuzz::join_parts({store_json, verified, craft, usage, canonical}));
  seed("chunk-kv", "store.variant", std::string(1, '\3') + fuzz::join_parts({store_json, "", craft, usage, variant}));
  nlohmann::json q4_store = nlohmann::json::parse(store_json);
  q4_store["format_version"] = 2;
  q4_store["dtype"] = "q4";
  seed("chunk-kv", "store.q4", std::string(1, '\3') + fuzz::join_parts({q4_store.dump(2), "", craft, usage, q4_variant}));
  seed("chunk-kv", "store.foreign", std::string(1, '\2') + fuzz::join_parts({R"({"format": "ragkv-store"})", verified, "[]", "{}", chain}));
}

void index_seeds(const fs::path& tmp) {
  std::vector<Chunk> chunks;
  const char* texts[3] = {"The Normans were a people.", "Warsaw is the capital of Poland.", "Tesla was an inventor."};
  for (int i = 0; i < 3; ++i)
    chunks.push_back(Chunk{"doc" + std::to_string(i) + "#0", "doc" + std::to_string(i), i == 1 ? "Warsaw" : "",
                           texts[i], 0, 6 + i});
  const EmbedFn embed = [](const std::vector<std::string>& ts) {
    std::vector<float> out;
    for (const std::string& t : ts)
      for (int d = 0; d < 4; ++d) out.push_back(float((t.size() * (d + 3)) % 7) + 0.5f);
    return out;
  };
  IndexBuildOptions opt;
  opt.hnsw.M = 2;
  opt.hnsw.ef_construction = 8;
  opt.tokenizer_fingerprint = "gpt2/smollm/49152/0123456789abcdef";
  opt.embedder_fingerprint = "fuzz-embedder:0123456789abcdef";
  const fs::path dir = tmp / "index";
  write_index_dir(dir, chunks, 3, embed, opt);
  const std::string files = fuzz::join_parts({read_file(dir / "manifest.json"), read_file(dir / "chunks.jsonl"),
                                              read_file(dir / "embeddings.bin"), read_file(dir / "hnsw.bin")});
  seed("index", "valid.flags0", std::string(1, '\0') + files);
  seed("index", "valid.flags7", std::string(1, '\7') + files);
  seed("index", "manifest-only.flags7", std::string(1, '\7') + read_file(dir / "manifest.json"));
}

void text_seeds(const std::string& target) {
  const char* texts[] = {
      "Hello world! The quick brown fox jumps over the lazy dog.",
      "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n",
      "<start_of_turn>user\nCaf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80<end_of_turn>\n",
      "[CLS] a sentence [SEP] [MASK] [PAD] [UNK] unaffable",
      "   leading spaces\t\ttabs\n\n\nnewlines   ",
      "[[[[[[[[[[]]]]]]]]]]((((((((((",
      "\xFF\xFE invalid \xC3 utf-8 \xE2\x82 \xF0\x9F",
  };
  int i = 0;
  for (const char* t : texts) seed(target, "text" + std::to_string(i++), t);
}

void query_seeds() {
  seed("queries", "valid.jsonl",
       R"({"id": "q1", "question": "Who?", "answers": ["a", "b"], "passages": ["d#0"], "gold_passages": ["d#0"]})"
       "\n"
       R"({"id": 7, "question": "When?", "conversation": "c1", "turn": 2})"
       "\n\r\n");
  seed("queries", "bad-lines.jsonl",
       "\xEF\xBB\xBF"
       R"({"id": "q1", "question": "ok"})"
       "\r\n[1, 2]\nnot json\n"
       R"({"id": "q1", "question": "dup"})"
       "\n"
       R"({"id": "", "question": "x"})"
       "\n"
       R"({"id": "q3", "question": "  ", "answers": "no"})"
       "\n"
       R"({"id": "q4", "question": "t", "turn": -1, "passages": [1]})"
       "\n\xC3\x28\n");
}

void corpus_seeds() {
  const std::string jsonl = R"({"id": "d1", "title": "Warsaw", "text": "Warsaw is the capital of Poland. It has a long history.\n\nIts old town was rebuilt."})"
                            "\n"
                            R"({"id": 2, "text": "Short."})"
                            "\n"
                            R"({"id": "d1", "text": "duplicate"})"
                            "\n"
                            R"({"text": "no id"})"
                            "\n";
  const std::string txt = "First paragraph, with a sentence. And another one!\n\nSecond paragraph? Yes.\nA line.\n";
  // flags, window, overlap, body (see fuzz-corpus.cpp)
  seed("corpus", "jsonl", std::string("\x00\x08\x02", 3) + jsonl);
  seed("corpus", "jsonl-skip", std::string("\x04\x03\x01", 3) + jsonl);
  seed("corpus", "txt", std::string("\x01\x05\x00", 3) + txt);
  seed("corpus", "md-bom", std::string("\x02\x10\x03", 3) + "\xEF\xBB\xBF# Title\n\n" + txt);
  seed("corpus", "dir", std::string("\x0C\x06\x02", 3) + fuzz::join_parts({txt, "md text", jsonl}));
}

void safetensors_seeds() {
  const fuzz::TinyBert b = fuzz::tiny_bert();
  seed("safetensors", "tiny-bert.folder",
       fuzz::join_parts({b.safetensors, b.config, b.vocab, b.tokenizer_config, b.sentence_bert_config}));
  seed("safetensors", "tiny-bert.safetensors", b.safetensors);
  seed("safetensors", "tiny-bert.cut", b.safetensors.substr(0, b.safetensors.size() / 2));
  std::string e = b.safetensors;
  poke<uint64_t>(e, 0, uint64_t(1) << 40);
  seed("safetensors", "tiny-bert.header-huge", e);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz-make-seeds CORPUS_DIR (the GGUF seeds of make-test-model already in it)\n");
    return 2;
  }
  try {
    g_out = argv[1];
    const fs::path tmp = fuzz::scratch_dir();
    for (const char* m : {"llama", "qwen2", "gemma3"})
      if (!fs::exists(g_out / "gguf" / (std::string(m) + ".gguf")))
        throw Error((g_out / "gguf" / m).string() + ".gguf is missing: run fuzz/make-seeds.sh");
    gguf_edits("llama", read_file(g_out / "gguf" / "llama.gguf"));  // the other two differ in metadata only
    const std::string spm = spm_gguf(tmp);
    seed("gguf", "spm-vocab.gguf", spm);
    gguf_edits("spm-vocab", spm);
    chunk_kv_seeds(tmp);
    index_seeds(tmp);
    query_seeds();
    corpus_seeds();
    safetensors_seeds();
    for (const char* t : {"tokenizer-bpe", "tokenizer-spm", "wordpiece"}) text_seeds(t);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz-make-seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
