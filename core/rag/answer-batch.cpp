// AnswerBatch: RagAnswerer's prefill and finish around one DecodeBatch.
#include "core/rag/answer-batch.h"

#include <algorithm>

#include "core/util/error.h"

namespace ragkv {

AnswerBatch::AnswerBatch(RagAnswerer& answerer, size_t max_active)
    : answerer_(answerer), max_active_(max_active), decode_(answerer.model()) {
  if (max_active_ == 0) fail("the answer batch needs room for at least one prompt");
}

void AnswerBatch::admit(size_t tag, const std::string& question, const std::vector<const Chunk*>& chunks,
                        const AnswerOptions& opt) {
  if (!can_admit()) fail("internal: the answer batch is full ({} prompts)", max_active_);
  PrefilledAnswer p = answerer_.prefill(question, chunks, opt);
  const int id = decode_.add(std::move(p.kv), p.logits, p.gen);
  p.logits.clear();
  pending_.emplace(id, Pending{tag, std::move(p)});
}

std::vector<std::pair<size_t, AnswerRecord>> AnswerBatch::step() {
  const size_t active = decode_.active();
  std::vector<int> finished = decode_.step();
  if (active > 0) {
    ++steps_;
    sequence_steps_ += active;
  }
  std::sort(finished.begin(), finished.end());
  std::vector<std::pair<size_t, AnswerRecord>> out;
  for (const int id : finished) {
    auto it = pending_.find(id);
    if (it == pending_.end()) fail("internal: the decode batch finished an unknown sequence {}", id);
    out.emplace_back(it->second.tag, RagAnswerer::finish(std::move(it->second.prefilled), decode_.take(id)));
    pending_.erase(it);
  }
  return out;
}

}  // namespace ragkv
