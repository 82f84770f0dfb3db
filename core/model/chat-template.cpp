// ChatTemplate::detect: recognises the chat markup a GGUF's template uses. Only single-turn
// user → assistant prompts, and the turn boundary of multi-turn ones, are rendered; the texts
// equal what the Jinja templates produce.
#include "core/model/chat-template.h"

#include "core/format/gguf.h"

namespace ragkv {

ChatTemplate ChatTemplate::detect(const GgufFile& gguf) {
  const std::string tpl = gguf.find_string("tokenizer.chat_template").value_or("");
  ChatTemplate t;
  // Only the template the GGUF carries counts: a base model (e.g. google/gemma-3-270m) has the
  // chat tokens in its vocabulary but was never trained on them.
  if (tpl.find("<|im_start|>") != std::string::npos) {
    t.name = "chatml";
    // SmolLM2's template inserts its default system prompt when the chat has none.
    const std::string marker = "{{ '<|im_start|>system\n";
    std::string system;
    if (auto p = tpl.find(marker); p != std::string::npos) {
      const auto b = p + marker.size();
      const auto e = tpl.find("<|im_end|>", b);
      if (e != std::string::npos) system = "<|im_start|>system\n" + tpl.substr(b, e - b) + "<|im_end|>\n";
    }
    t.user_open = system + "<|im_start|>user\n";
    t.user_close = "<|im_end|>\n<|im_start|>assistant\n";
    t.next_user_open = "<|im_end|>\n<|im_start|>user\n";
  } else if (tpl.find("<start_of_turn>") != std::string::npos) {
    t.name = "gemma";
    t.user_open = "<start_of_turn>user\n";
    t.user_close = "<end_of_turn>\n<start_of_turn>model\n";
    t.next_user_open = "<end_of_turn>\n<start_of_turn>user\n";
  } else if (tpl.find("<|start_header_id|>") != std::string::npos) {
    t.name = "llama3";
    t.user_open = "<|start_header_id|>user<|end_header_id|>\n\n";
    t.user_close = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    t.next_user_open = "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n";
  } else {
    t.name = "none";
    t.next_user_open = "\n\n";
  }
  return t;
}

}  // namespace ragkv
