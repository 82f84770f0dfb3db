// tiny_bert(): config.json, vocab.txt and the tokenizer configs of a BERT with 2 layers of width
// 8, and its model.safetensors (deterministic small weights), written with nlohmann::json.
#include "fuzz/tiny-bert.h"

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace ragkv::fuzz {

namespace {

constexpr int kVocab = 24, kEmbd = 8, kLayers = 2, kHeads = 2, kFf = 16, kPos = 16, kTypes = 2;

const char* const kTokens[kVocab] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!",
                                     "the",   "cafe",  "##s",   "a",     "##b",    "中",     "x",     "##x",
                                     "y",     "1",     "2",     "##1",   ".",      "?",     "z"};

}  // namespace

TinyBert tiny_bert() {
  TinyBert b;
  b.config = nlohmann::json{{"model_type", "bert"},        {"hidden_act", "gelu"},
                            {"vocab_size", kVocab},        {"hidden_size", kEmbd},
                            {"num_hidden_layers", kLayers}, {"num_attention_heads", kHeads},
                            {"intermediate_size", kFf},     {"max_position_embeddings", kPos},
                            {"type_vocab_size", kTypes},    {"layer_norm_eps", 1e-12}}
                 .dump();
  for (const char* t : kTokens) b.vocab += std::string(t) + "\n";
  b.tokenizer_config = R"({"do_lower_case": true, "unk_token": "[UNK]", "strip_accents": null, "model_max_length": 16})";
  b.sentence_bert_config = R"({"max_seq_length": 12, "do_lower_case": false})";

  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"embeddings.word_embeddings.weight", {kVocab, kEmbd}},
      {"embeddings.position_embeddings.weight", {kPos, kEmbd}},
      {"embeddings.token_type_embeddings.weight", {kTypes, kEmbd}},
      {"embeddings.LayerNorm.weight", {kEmbd}},
      {"embeddings.LayerNorm.bias", {kEmbd}},
  };
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"}) {
      shapes.push_back({p + m + ".weight", {kEmbd, kEmbd}});
      shapes.push_back({p + m + ".bias", {kEmbd}});
    }
    shapes.push_back({p + "attention.output.LayerNorm.weight", {kEmbd}});
    shapes.push_back({p + "attention.output.LayerNorm.bias", {kEmbd}});
    shapes.push_back({p + "intermediate.dense.weight", {kFf, kEmbd}});
    shapes.push_back({p + "intermediate.dense.bias", {kFf}});
    shapes.push_back({p + "output.dense.weight", {kEmbd, kFf}});
    shapes.push_back({p + "output.dense.bias", {kEmbd}});
    shapes.push_back({p + "output.LayerNorm.weight", {kEmbd}});
    shapes.push_back({p + "output.LayerNorm.bias", {kEmbd}});
  }
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  uint32_t seed = 1;
  for (const auto& [name, shape] : shapes) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    const size_t begin = data.size();
    for (size_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;  // LCG: deterministic seeds
      const float v = name.find("LayerNorm.weight") != std::string::npos ? 1.f : float(int(seed >> 24) - 128) / 512.f;
      data.append(reinterpret_cast<const char*>(&v), 4);
    }
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  b.safetensors.assign(reinterpret_cast<const char*>(&n), 8);
  b.safetensors += h;
  b.safetensors += data;
  return b;
}

}  // namespace ragkv::fuzz
