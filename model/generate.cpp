// Greedy decoding loop over Model::forward.
#include "model/generate.h"

#include <chrono>

#include "util/error.h"

namespace ragkv {

int32_t argmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = int32_t(i);
  return best;
}

std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  const auto body = tok.encode(text, /*parse_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

DecodeResult decode_greedy(const Model& model, KvCache& kv, Workspace& ws, std::vector<float> logits,
                           const GenerateOptions& opt,
                           const std::function<void(const std::string&)>& on_piece) {
  using clock = std::chrono::steady_clock;
  if (kv.n_used + opt.max_tokens > kv.n_ctx)
    fail("internal: {} new tokens do not fit after {} prompt rows in a context of {}", opt.max_tokens,
         kv.n_used, kv.n_ctx);
  DecodeResult r;
  const auto t0 = clock::now();
  const Tokenizer& tok = model.tokenizer();
  auto has_text = [&] { return r.text.find_first_not_of(" \t\r\n") != std::string::npos; };
  for (int i = 0; i < opt.max_tokens; ++i) {
    const int32_t next = argmax(logits);
    if (opt.stop_at_eog && tok.is_eog(next)) break;
    std::string piece = tok.token_to_piece(next);
    if (opt.stop_at_newline && has_text()) {
      if (const auto nl = piece.find('\n'); nl != std::string::npos) {
        r.text += piece.substr(0, nl);
        if (nl > 0) r.output_ids.push_back(next);
        break;
      }
    }
    r.output_ids.push_back(next);
    r.text += piece;
    if (on_piece) on_piece(piece);
    if (i + 1 == opt.max_tokens) break;
    const int32_t one[1] = {next};
    logits = model.forward(one, kv, ws);
  }
  if (opt.stop_at_newline) {
    const auto b = r.text.find_first_not_of(" \t\r\n");
    const auto e = r.text.find_last_not_of(" \t\r\n");
    r.text = b == std::string::npos ? "" : r.text.substr(b, e - b + 1);
  }
  r.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  return r;
}

GenerateResult generate_greedy(const Model& model, const std::vector<int32_t>& prompt_ids,
                               const GenerateOptions& opt,
                               const std::function<void(const std::string&)>& on_piece) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& cfg = model.config();
  if (prompt_ids.empty()) fail("the prompt is empty");
  const int64_t n_ctx = opt.n_ctx > 0 ? opt.n_ctx : int64_t(prompt_ids.size()) + opt.max_tokens;
  if (int64_t(prompt_ids.size()) + opt.max_tokens > cfg.n_ctx_train)
    fail("the prompt ({} tokens) plus {} new tokens exceeds the model's context of {} tokens",
         prompt_ids.size(), opt.max_tokens, cfg.n_ctx_train);
  if (int64_t(prompt_ids.size()) + opt.max_tokens > n_ctx)
    fail("the prompt ({} tokens) plus {} new tokens exceeds the context of {} tokens",
         prompt_ids.size(), opt.max_tokens, n_ctx);

  GenerateResult r;
  r.prompt_ids = prompt_ids;
  KvCache kv = model.new_kv_cache(n_ctx);
  Workspace ws;
  auto t0 = clock::now();
  std::vector<float> logits = model.forward(prompt_ids, kv, ws);
  r.prefill_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  r.first_logits = logits;

  DecodeResult d = decode_greedy(model, kv, ws, std::move(logits), opt, on_piece);
  r.output_ids = std::move(d.output_ids);
  r.text = std::move(d.text);
  r.decode_ms = d.decode_ms;
  return r;
}

}  // namespace ragkv
