// RagAnswerer: plan, prefill with retry on a cache that fails mid-load, greedy decode, metrics.
#include "rag/answer.h"

#include <cmath>

#include "util/error.h"
#include "kv/layer-loader.h"
#include "retrieval/chunker.h"

namespace ragkv {

nlohmann::json AnswerRecord::metrics() const {
  const PrefillStats& p = prefill;
  const int64_t computed = p.n_layer > 0 ? int64_t(std::llround(double(p.computed_token_layers) / p.n_layer)) : 0;
  return {{"ttft_ms", ttft_ms()},
          {"retrieval_ms", retrieval_ms},
          {"prefill_ms", p.prefill_ms},
          {"load_ms", p.load_ms},
          {"load_hidden_ms", std::max(0.0, p.load_ms - p.load_wait_ms)},
          {"prefill_tokens", p.prompt_tokens},
          {"computed_tokens", computed},
          {"reused_tokens", p.reused_tokens},
          {"recompute_ratio", p.recompute_fraction()},
          {"real_compute_fraction", p.reused_tokens > 0 ? nlohmann::json(p.reused_recompute_fraction()) : nlohmann::json(nullptr)},
          {"decode_ms", decode_ms},
          {"output_tokens", output_ids.size()},
          {"cache_hits", {{"device", cache.device_hits}, {"host", cache.host_hits}, {"disk", cache.disk_hits}}},
          {"cache_exact_hits", cache.exact_hits},
          {"cache_misses", cache.misses},
          {"cache_bad", cache.bad}};
}

RagAnswerer::RagAnswerer(const Model& model, const PromptFormat& format, const KvTiers* tiers)
    : model_(model), format_(format), tiers_(tiers), keys_(model, format) {}

AnswerRecord RagAnswerer::answer(const std::string& question, const std::vector<const Chunk*>& chunks,
                                 const AnswerOptions& opt) {
  const RagPrompt prompt = format_.build(chunks, question);
  const int64_t n_ctx = prompt.n_tokens() + opt.gen.max_tokens;
  if (n_ctx > model_.config().n_ctx_train)
    fail("the prompt ({} tokens for {} chunks) plus {} new tokens exceeds the model's context of {} tokens",
         prompt.n_tokens(), chunks.size(), opt.gen.max_tokens, model_.config().n_ctx_train);

  AnswerRecord rec;
  rec.mode = reuse_mode_name(opt.mode);
  for (const Chunk* c : chunks) rec.chunk_ids.push_back(c->id);

  PrefillPlan plan = plan_prefill(prompt, opt.mode, opt.blend, model_.config().n_layer, tier_lookup(keys_, tiers_));
  KvCache kv = model_.new_kv_cache(n_ctx);
  PrefillResult pre;
  for (;;) {
    try {
      pre = prefill_prompt(model_, prompt, plan, kv, ws_);
      break;
    } catch (const ChunkLoadFailed& e) {  // a layer block failed its checksum: recompute that segment
      plan.drop_cache(e.job);
    }
  }
  rec.cache = plan.counts;
  rec.prefill = pre.stats;
  rec.first_logits = pre.logits;

  GenerateOptions gen = opt.gen;
  gen.stop_at_newline = true;
  DecodeResult d = decode_greedy(model_, kv, ws_, std::move(pre.logits), gen);
  rec.answer = std::move(d.text);
  rec.output_ids = std::move(d.output_ids);
  rec.decode_ms = d.decode_ms;
  return rec;
}

}  // namespace ragkv
