// A tiny valid BERT model folder (the shape of all-MiniLM-L6-v2, a few floats wide): the default
// files of the safetensors fuzz target and its seeds (fuzz/make-seeds.cpp).
#pragma once
#include <string>

namespace ragkv::fuzz {

struct TinyBert {
  std::string safetensors;  // model.safetensors: every tensor Embedder::load asks for, f32
  std::string config, vocab, tokenizer_config, sentence_bert_config;
};
TinyBert tiny_bert();

}  // namespace ragkv::fuzz
