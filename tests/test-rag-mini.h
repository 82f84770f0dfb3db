// The rag-mini data on the default model, for the chunk-KV tests: the CPU backend, SmolLM2 and its
// prompt format, testdata/rag-mini's six passages as one chunk each, and its twelve questions.
#pragma once
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend/cpu-backend.h"
#include "core/model/model.h"
#include "core/rag/prompt.h"
#include "retrieval/chunker.h"
#include "tests/test-paths.h"

namespace ragkv::test {

struct RagMini {
  std::unique_ptr<Backend> backend = make_cpu_backend(2);
  std::unique_ptr<Model> model;
  std::unique_ptr<PromptFormat> format;
  std::vector<Chunk> chunks;
  std::vector<std::string> questions;
  RagMini() {
    model = std::make_unique<Model>(smollm_path(), *backend);
    format = std::make_unique<PromptFormat>(*model);
    std::ifstream f(testdata("rag-mini.corpus.jsonl"));
    for (std::string line; std::getline(f, line);) {
      const auto j = nlohmann::json::parse(line);
      Chunk c;
      c.doc = j["id"];
      c.id = c.doc + "#0";
      c.title = j["title"];
      c.text = j["text"];
      chunks.push_back(c);
    }
    std::ifstream q(testdata("rag-mini.queries.jsonl"));
    for (std::string line; std::getline(q, line);) questions.push_back(nlohmann::json::parse(line)["question"]);
  }
  std::vector<const Chunk*> pick(std::initializer_list<int> idx) const {
    std::vector<const Chunk*> out;
    for (int i : idx) out.push_back(&chunks[size_t(i)]);
    return out;
  }
  std::vector<const Chunk*> all() const {
    std::vector<const Chunk*> out;
    for (const Chunk& c : chunks) out.push_back(&c);
    return out;
  }
};

}  // namespace ragkv::test
