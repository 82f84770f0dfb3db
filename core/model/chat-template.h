// Chat templates of the supported model families, split where DESIGN.md §4 needs them:
// the opening of a user turn (system prompt included), and the close of the user turn plus the
// opening of the assistant's. Detected from tokenizer.chat_template and the vocabulary.
#pragma once
#include <string>

namespace ragkv {

class GgufFile;

struct ChatTemplate {
  std::string name;         // "chatml", "gemma", "llama3", "none"
  std::string user_open;    // text before the user's message (BOS excluded)
  std::string user_close;   // after the user's message, up to the assistant's first token
  // Multi-turn: after the assistant's answer, up to the next user message's first token (the
  // end of the assistant's turn and the opening of the user's, without the system prompt).
  std::string next_user_open;

  std::string wrap(const std::string& user_message) const { return user_open + user_message + user_close; }
  static ChatTemplate detect(const GgufFile& gguf);
};

}  // namespace ragkv
