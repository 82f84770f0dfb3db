// PromptFormat: the segments of a RAG prompt, tokenized one by one (DESIGN.md §4).
#include "core/rag/prompt.h"

#include "core/format/checksum.h"
#include "core/util/error.h"
#include "core/model/generate.h"
#include "core/model/model.h"
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

std::vector<int32_t> PromptFormat::turn_close_ids(const std::string& answer, bool chunks_follow) const {
  const Tokenizer& tok = model_.tokenizer();
  std::vector<int32_t> ids = tok.encode((chat() ? "" : " ") + answer, false);
  const auto close = tok.encode(tmpl_.next_user_open, /*parse_special=*/true);
  ids.insert(ids.end(), close.begin(), close.end());
  if (chunks_follow) {
    const auto more = tok.encode("Passages:\n", false);
    ids.insert(ids.end(), more.begin(), more.end());
  }
  return ids;
}

RagPrompt PromptFormat::build(const std::vector<const Chunk*>& chunks, const std::string& question,
                              const std::vector<PastTurn>& history) const {
  RagPrompt p;
  auto add = [&](PromptSegment::Kind kind, std::string id, std::vector<int32_t> ids) {
    PromptSegment s{kind, std::move(id), std::move(ids), p.n_tokens()};
    p.ids.insert(p.ids.end(), s.ids.begin(), s.ids.end());
    p.segments.push_back(std::move(s));
  };
  add(PromptSegment::Kind::prefix, "", prefix_ids_);
  for (size_t t = 0; t < history.size(); ++t) {
    for (const Chunk* c : history[t].chunks) add(PromptSegment::Kind::chunk, c->id, chunk_ids(*c));
    const bool chunks_follow = t + 1 < history.size() ? !history[t + 1].chunks.empty() : !chunks.empty();
    std::vector<int32_t> ids = suffix_ids(history[t].question);
    const auto close = turn_close_ids(history[t].answer, chunks_follow);
    ids.insert(ids.end(), close.begin(), close.end());
    add(PromptSegment::Kind::turn, "", std::move(ids));
  }
  for (const Chunk* c : chunks) add(PromptSegment::Kind::chunk, c->id, chunk_ids(*c));
  add(PromptSegment::Kind::suffix, "", suffix_ids(question));
  return p;
}

}  // namespace ragkv
