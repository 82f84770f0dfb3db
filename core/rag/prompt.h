// The RAG prompt layout of DESIGN.md §4:
//   [BOS][instruction prefix] [chunk 1] … [chunk k] [question + chat-template suffix]
// Each segment is tokenized on its own and the ids concatenated, so every mode sees the same
// tokens and a chunk's tokens do not depend on where it lands (its cache can be reused).
// A chunk renders as its title, a newline, its text and a blank line — never "Passage 3:".
// A conversation's later turn (CRAFT §3.2 and §4.3's layout) continues its earlier turns:
//   [prefix][turn 1's chunks][turn 1: question, answer, next user turn] … [new chunks][question]
// where each earlier turn keeps the chunks it added and a turn segment (its question suffix, the
// answer given, the close of the assistant's turn and "Passages:" when chunks follow); chunks
// already in the conversation are not repeated (conversation-scoped deduplication: the caller
// passes each turn only the chunks it adds).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/chat-template.h"

namespace ragkv {

class Model;
struct Chunk;

struct PromptSegment {
  enum class Kind : uint8_t { prefix, chunk, turn, suffix };  // turn: an earlier turn's question and answer
  Kind kind = Kind::prefix;
  std::string chunk_id;        // chunks only
  std::vector<int32_t> ids;
  int64_t begin = 0;           // absolute position of the first token
  int64_t end() const { return begin + int64_t(ids.size()); }
};

// An earlier turn of the conversation a prompt continues.
struct PastTurn {
  std::vector<const Chunk*> chunks;  // the chunks it added, in prompt order
  std::string question, answer;
};

struct RagPrompt {
  std::vector<PromptSegment> segments;  // prefix, chunks in prompt order, suffix
  std::vector<int32_t> ids;             // all tokens, in order
  int64_t n_tokens() const { return int64_t(ids.size()); }
};

class PromptFormat {
 public:
  explicit PromptFormat(const Model& model);

  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }
  // Identifies the canonical context chunk caches are computed in: "canonical:<hex of the
  // prefix ids' hash>" — a changed instruction or template invalidates every stored chunk.
  const std::string& prefix_description() const { return prefix_description_; }
  std::vector<int32_t> chunk_ids(const Chunk& c) const;
  std::vector<int32_t> suffix_ids(const std::string& question) const;
  // Answers end at the first line break after some text (a base model would go on to write
  // the next "Question:"); chat models also stop at their end-of-turn token.
  bool chat() const { return tmpl_.name != "none"; }
  const ChatTemplate& chat_template() const { return tmpl_; }

  RagPrompt build(const std::vector<const Chunk*>& chunks, const std::string& question,
                  const std::vector<PastTurn>& history = {}) const;
  // The turn segment after an earlier turn's question: its answer, the end of the assistant's
  // turn, the next user turn's opening and, when chunks follow, "Passages:".
  std::vector<int32_t> turn_close_ids(const std::string& answer, bool chunks_follow) const;

  // The instruction and question wording (kept here so tests and reports can quote them).
  static const char* kInstruction;

 private:
  const Model& model_;
  ChatTemplate tmpl_;
  std::vector<int32_t> prefix_ids_;
  std::string prefix_description_;
};

}  // namespace ragkv
