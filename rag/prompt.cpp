// PromptFormat: the segments of a RAG prompt, tokenized one by one (DESIGN.md §4).
#include "rag/prompt.h"

#include "format/checksum.h"
#include "util/error.h"
#include "model/generate.h"
#include "model/model.h"
#include "retrieval/chunker.h"

namespace ragkv {

// The CacheBlend evaluation asks for answers "within 5 words" (CacheBlend §7.1, footnote 7):
// gold answers are short spans, and F1 punishes long ones.
const char* PromptFormat::kInstruction =
    "You will be asked a question after reading several passages. Answer it directly from the "
    "passages, within 5 words.\n\nPassages:\n";

PromptFormat::PromptFormat(const Model& model) : model_(model), tmpl_(ChatTemplate::detect(model.gguf())) {
  const Tokenizer& tok = model.tokenizer();
  prefix_ids_ = tokenize_prompt(tok, tmpl_.user_open);  // BOS + template opening
  const auto instr = tok.encode(kInstruction, /*parse_special=*/false);
  prefix_ids_.insert(prefix_ids_.end(), instr.begin(), instr.end());
  prefix_description_ = "canonical:" + checksum_hex(checksum64(prefix_ids_.data(), prefix_ids_.size() * sizeof(int32_t)));
}

std::vector<int32_t> PromptFormat::chunk_ids(const Chunk& c) const {
  const std::string text = c.title.empty() ? c.text + "\n\n" : c.title + "\n" + c.text + "\n\n";
  return model_.tokenizer().encode(text, /*parse_special=*/false);
}

std::vector<int32_t> PromptFormat::suffix_ids(const std::string& question) const {
  const Tokenizer& tok = model_.tokenizer();
  if (!chat()) return tok.encode("Question: " + question + "\nAnswer:", false);
  auto ids = tok.encode("Question: " + question + "\nAnswer within 5 words.", false);
  const auto close = tok.encode(tmpl_.user_close, /*parse_special=*/true);
  ids.insert(ids.end(), close.begin(), close.end());
  return ids;
}

RagPrompt PromptFormat::build(const std::vector<const Chunk*>& chunks, const std::string& question) const {
  RagPrompt p;
  auto add = [&](PromptSegment::Kind kind, std::string id, std::vector<int32_t> ids) {
    PromptSegment s{kind, std::move(id), std::move(ids), p.n_tokens()};
    p.ids.insert(p.ids.end(), s.ids.begin(), s.ids.end());
    p.segments.push_back(std::move(s));
  };
  add(PromptSegment::Kind::prefix, "", prefix_ids_);
  for (const Chunk* c : chunks) add(PromptSegment::Kind::chunk, c->id, chunk_ids(*c));
  add(PromptSegment::Kind::suffix, "", suffix_ids(question));
  return p;
}

}  // namespace ragkv
