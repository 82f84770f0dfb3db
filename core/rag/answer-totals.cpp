// AnswerTotals: sums per answered query, means in the summary.
#include "core/rag/answer-totals.h"

#include <algorithm>

namespace ragkv {

using nlohmann::json;

void AnswerTotals::add(const AnswerRecord& r) {
  ++n;
  ttft += r.ttft_ms();
  prefill += r.prefill.prefill_ms;
  recompute += r.prefill.compute_fraction();
  load += r.prefill.load_ms;
  hidden += std::max(0.0, r.prefill.load_ms - r.prefill.load_wait_ms);
  hits += r.cache.hits();
  device_hits += r.cache.device_hits;
  host_hits += r.cache.host_hits;
  disk_hits += r.cache.disk_hits;
  chunk_hits += double(r.chunk_hits);
  chunk_memory_hits += double(r.chunk_memory_hits);
  chunks += double(r.chunk_ids.size());
  exact_path_chunks += double(r.exact_path_chunks);
  prompt_tokens += double(r.prefill.prompt_tokens);
  if (r.prefill.n_layer > 0) computed_tokens += double(r.prefill.computed_token_layers) / r.prefill.n_layer;
  composed += r.composed;
  fallbacks += r.fell_back;
  misses += r.cache.misses;
  bad += r.cache.bad;
  if (r.load_control) load_control.add(*r.load_control, r.prefill.load_ms, r.prefill.prefill_ms);
}

json AnswerTotals::to_json() const {
  auto m = [&](double s, size_t k) { return k ? json(s / double(k)) : json(nullptr); };
  return {{"queries", n}, {"ttft_ms", m(ttft, n)}, {"prefill_ms", m(prefill, n)}, {"compute_fraction", m(recompute, n)},
          {"load_ms", m(load, n)}, {"load_hidden_ms", m(hidden, n)},
          {"cache_hits", hits}, {"cache_hits_per_tier", {{"device", device_hits}, {"host", host_hits}, {"disk", disk_hits}}},
          {"chunks_retrieved", chunks}, {"chunk_hits", chunk_hits},
          {"chunk_hit_rate", chunks > 0 ? json(chunk_hits / chunks) : json(nullptr)},  // RAGCache §7: hit chunks / retrieved
          {"chunk_memory_hit_rate", chunks > 0 ? json(chunk_memory_hits / chunks) : json(nullptr)},  // from device or host
          {"exact_path_chunks", exact_path_chunks}, {"prompt_tokens", prompt_tokens},
          {"computed_tokens", computed_tokens}, {"cache_misses", misses}, {"cache_bad", bad}, {"variants_written", written_back},
          {"variant_write_failures", write_back_failed}, {"composed_answers", composed}, {"fallbacks", fallbacks},
          {"load_control", load_control.empty() ? json(nullptr) : load_control.to_json()}};
}

}  // namespace ragkv
