// RagAnswerer: cache lookup per segment, prefill with retry on a cache that fails mid-load,
// greedy decode, metrics.
#include "core/rag-answer.h"

#include <cmath>

#include "core/error.h"
#include "core/kv-loader.h"
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
          {"decode_ms", decode_ms},
          {"output_tokens", output_ids.size()},
          {"cache_hits", {{"device", 0}, {"host", 0}, {"disk", cache.hits}}},
          {"cache_exact_hits", cache.exact_hits},
          {"cache_misses", cache.misses},
          {"cache_bad", cache.bad}};
}

std::vector<SegmentSource> open_segment_sources(const KvStore* store, const CacheKeys& keys, const RagPrompt& prompt,
                                               ReuseMode mode, CacheCounts& counts) {
  std::vector<SegmentSource> sources(prompt.segments.size());
  if (!store || mode == ReuseMode::full) return sources;
  // `prefix` needs only the segments an exact prefix can cover; the question is never cached.
  const size_t last = mode == ReuseMode::prefix ? std::min<size_t>(2, prompt.segments.size() - 1)
                                                : prompt.segments.size() - 1;
  for (size_t s = 0; s < last; ++s) {
    const PromptSegment& seg = prompt.segments[s];
    const ChunkKvMeta key = seg.kind == PromptSegment::Kind::prefix ? keys.prefix() : keys.chunk(seg.chunk_id, seg.ids);
    try {
      sources[s].cache = store->open_chunk(key);
      if (sources[s].cache) ++counts.hits;
      else ++counts.misses;
    } catch (const CacheFileError&) {
      ++counts.bad;
    }
  }
  return sources;
}

RagAnswerer::RagAnswerer(const Model& model, const PromptFormat& format, const KvStore* store)
    : model_(model), format_(format), store_(store), keys_(model, format) {}

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

  std::vector<SegmentSource> sources = open_segment_sources(store_, keys_, prompt, opt.mode, rec.cache);

  KvCache kv = model_.new_kv_cache(n_ctx);
  PrefillResult pre;
  for (;;) {
    try {
      pre = prefill_prompt(model_, prompt, sources, opt.mode, opt.blend, kv, ws_);
      break;
    } catch (const ChunkLoadFailed& e) {  // a layer block failed its checksum: recompute that segment
      sources.at(e.job).cache.reset();
      --rec.cache.hits;
      ++rec.cache.bad;
    }
  }
  for (size_t s = 0; s < sources.size(); ++s)
    if (sources[s].exact()) ++rec.cache.exact_hits;
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
