// The decoding loop over Model::forward: greedy, or sampled with temperature and top-p.
#include "core/model/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/util/error.h"
#include "core/util/utf8.h"

namespace ragkv {

namespace {

// The index of the largest logit, the first on ties; NaNs are never chosen, except a NaN at index
// 0, which is (the result of the plain loop `if (l[i] > l[best]) best = i`). The maximum is found
// in eight independent lanes (vectorised: a 262,144-entry vocabulary's scan was 4 % of a Gemma 3
// decode step), then its first index.
int32_t argmax_first(const float* logits, int64_t n) {
  if (n <= 0) return 0;
  float mx = logits[0];
  if (mx != mx) return 0;
  float lane[8];
  for (float& l : lane) l = mx;
  int64_t i = 1;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lane[l] = logits[i + l] > lane[l] ? logits[i + l] : lane[l];
  for (; i < n; ++i) mx = logits[i] > mx ? logits[i] : mx;
  for (float l : lane) mx = l > mx ? l : mx;
  for (int64_t j = 0; j < n; ++j)
    if (logits[j] == mx) return int32_t(j);
  return 0;
}

}  // namespace

int32_t argmax(const std::vector<float>& v) { return argmax_first(v.data(), int64_t(v.size())); }

double top2_probability_gap(const std::vector<float>& logits) {
  if (logits.size() < 2) return 1.0;
  float a = -INFINITY, b = -INFINITY;  // the two largest logits
  for (float l : logits) {
    if (l > a) {
      b = a;
      a = l;
    } else if (l > b) {
      b = l;
    }
  }
  if (!std::isfinite(a)) return 0.0;
  double z = 0;  // softmax's normaliser relative to the largest logit
  for (float l : logits) z += std::exp(double(l) - double(a));
  return (1.0 - std::exp(double(b) - double(a))) / z;
}

std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  const auto body = tok.encode(text, /*parse_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

// Nucleus sampling (Holtzman et al. 2020, §3.1): p ∝ exp((l − max) / T) over the finite logits;
// the most likely tokens (ties by id) holding top_p of the mass are kept and one is drawn in
// proportion to p with a uniform double from the sequence's own generator.
int32_t TokenChooser::sample(const float* logits, int64_t n_vocab) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n_vocab; ++i)
    if (std::isfinite(logits[i])) mx = std::max(mx, logits[i]);
  if (!std::isfinite(mx)) return argmax_first(logits, n_vocab);
  std::vector<std::pair<double, int32_t>> p;
  p.reserve(size_t(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i)
    if (std::isfinite(logits[i])) p.emplace_back(std::exp(double(logits[i] - mx) / opt_.temperature), int32_t(i));
  double all = 0;
  for (const auto& e : p) all += e.first;
  size_t keep = p.size();
  double total = all;
  if (opt_.top_p < 1) {
    // The nucleus, most likely first (ties by id): only the head of the order is sorted, doubled
    // until it holds top_p of the mass (a 262,144-token vocabulary is not sorted each step).
    const auto before = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
    for (size_t head = std::min<size_t>(64, p.size());; head = std::min(2 * head, p.size())) {
      std::partial_sort(p.begin(), p.begin() + std::ptrdiff_t(head), p.end(), before);
      total = 0;
      for (keep = 0; keep < head && (keep == 0 || total < double(opt_.top_p) * all); ++keep) total += p[keep].first;
      if (total >= double(opt_.top_p) * all || head == p.size()) break;
    }
  }
  const double u = double(rng_() >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i].first;
    if (u < acc) return p[i].second;
  }
  return p[keep - 1].second;
}

size_t TokenChooser::stop_position(size_t appended_from) const {
  size_t cut = std::string::npos;
  for (const std::string& s : opt_.stop) {
    if (s.empty()) continue;
    const size_t from = appended_from >= s.size() ? appended_from - s.size() + 1 : 0;
    if (const size_t at = r_.text.find(s, from); at != std::string::npos) cut = std::min(cut, at);
  }
  return cut;
}

bool TokenChooser::choose(const float* logits, int64_t n_vocab,
                          const std::function<void(const std::string&)>& on_piece) {
  auto has_text = [&] { return r_.text.find_first_not_of(" \t\r\n") != std::string::npos; };
  if (steps_ >= opt_.max_tokens) return false;
  ++steps_;
  const int32_t best = opt_.temperature > 0 ? sample(logits, n_vocab) : argmax_first(logits, n_vocab);
  next_ = best;
  if (opt_.stop_at_eog && tok_.is_eog(best)) return false;
  std::string piece = tok_.token_to_piece(best);
  if (opt_.stop_at_newline && has_text()) {
    if (const auto nl = piece.find('\n'); nl != std::string::npos) {
      r_.text += piece.substr(0, nl);
      if (nl > 0) r_.output_ids.push_back(best);
      return false;
    }
  }
  r_.output_ids.push_back(best);
  const size_t before = r_.text.size();
  r_.text += piece;
  if (const size_t cut = stop_position(before); cut != std::string::npos) {
    if (on_piece && cut > before) on_piece(r_.text.substr(before, cut - before));
    r_.text.resize(cut);
    return false;
  }
  if (on_piece) on_piece(piece);
  return steps_ < opt_.max_tokens;
}

DecodeResult TokenChooser::finish() {
  if (opt_.stop_at_newline) {
    const auto b = r_.text.find_first_not_of(" \t\r\n");
    const auto e = r_.text.find_last_not_of(" \t\r\n");
    r_.text = b == std::string::npos ? "" : r_.text.substr(b, e - b + 1);
  }
  r_.text = to_valid_utf8(r_.text);  // the answer may end inside a character (output_ids keep every token)
  return std::move(r_);
}

DecodeResult decode_text(const Model& model, KvCache& kv, Workspace& ws, std::vector<float> logits,
                           const GenerateOptions& opt,
                           const std::function<void(const std::string&)>& on_piece) {
  using clock = std::chrono::steady_clock;
  if (kv.n_used + opt.max_tokens > kv.n_ctx)
    fail("internal: {} new tokens do not fit after {} prompt rows in a context of {}", opt.max_tokens,
         kv.n_used, kv.n_ctx);
  const auto t0 = clock::now();
  TokenChooser chooser(model.tokenizer(), opt);
  KvCache* kvs[1] = {&kv};
  const int64_t n_vocab = model.config().n_vocab;
  while (chooser.choose(logits.data(), n_vocab, on_piece)) {
    const int32_t one[1] = {chooser.next()};
    logits = model.decode_step(one, kvs, ws);
  }
  DecodeResult r = chooser.finish();
  r.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  return r;
}

int DecodeBatch::add(KvCache kv, const std::vector<float>& logits, const GenerateOptions& opt) {
  if (kv.n_used + opt.max_tokens > kv.n_ctx)
    fail("internal: {} new tokens do not fit after {} prompt rows in a context of {}", opt.max_tokens,
         kv.n_used, kv.n_ctx);
  const int id = next_id_++;
  auto s = std::unique_ptr<Sequence>(
      new Sequence{std::move(kv), TokenChooser(model_.tokenizer(), opt), false, std::chrono::steady_clock::now(), 0});
  if (!s->chooser.choose(logits.data(), model_.config().n_vocab)) {
    s->done = true;
    finished_at_add_.push_back(id);
  }
  seqs_.emplace(id, std::move(s));
  return id;
}

size_t DecodeBatch::active() const {
  size_t n = 0;
  for (const auto& [id, s] : seqs_) n += !s->done;
  return n;
}

std::vector<int> DecodeBatch::step() {
  std::vector<int> finished = std::move(finished_at_add_);
  finished_at_add_.clear();
  std::vector<int> ids;
  std::vector<int32_t> tokens;
  std::vector<KvCache*> kvs;
  for (auto& [id, s] : seqs_)
    if (!s->done) {
      ids.push_back(id);
      tokens.push_back(s->chooser.next());
      kvs.push_back(&s->kv);
    }
  if (!ids.empty()) {
    const std::vector<float> logits = model_.decode_step(tokens, kvs, ws_);
    const int64_t n_vocab = model_.config().n_vocab;
    for (size_t i = 0; i < ids.size(); ++i) {
      Sequence& s = *seqs_.at(ids[i]);
      if (!s.chooser.choose(logits.data() + int64_t(i) * n_vocab, n_vocab)) {
        s.done = true;
        finished.push_back(ids[i]);
      }
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (const int id : finished) {
    Sequence& s = *seqs_.at(id);
    s.decode_ms = std::chrono::duration<double, std::milli>(now - s.start).count();
  }
  return finished;
}

DecodeResult DecodeBatch::take(int id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second->done) fail("internal: sequence {} of the decode batch is not finished", id);
  DecodeResult r = it->second->chooser.finish();
  r.decode_ms = it->second->decode_ms;
  seqs_.erase(it);
  return r;
}

GenerateResult generate_text(const Model& model, const std::vector<int32_t>& prompt_ids,
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

  DecodeResult d = decode_text(model, kv, ws, std::move(logits), opt, on_piece);
  r.output_ids = std::move(d.output_ids);
  r.text = std::move(d.text);
  r.decode_ms = d.decode_ms;
  return r;
}

}  // namespace ragkv
