// The trace replay of `bench cache` (bench/cache-trace.h) on hand-checked synthetic traces:
// exact-prefix hits from memory, CRAFT's frequency order turning an out-of-position chunk into a
// hit, query reordering, a budget too small to keep anything, and the budget never exceeded.
#include <doctest/doctest.h>

#include "bench/cache-trace.h"

using namespace ragkv;

namespace {

// Prefix 10 tokens, chunks of 100, question 20; 1 byte per token.
CacheTrace trace_of(const std::vector<std::vector<std::string>>& requests) {
  CacheTrace t;
  t.prefix_tokens = 10;
  t.bytes_per_token = 1;
  for (const auto& r : requests) {
    TraceRequest q;
    q.chunks = r;
    q.chunk_tokens.assign(r.size(), 100);
    q.prompt_tokens = 10 + 100 * int64_t(r.size()) + 20;
    t.requests.push_back(q);
  }
  return t;
}

}  // namespace

TEST_CASE("cache trace: exact prefixes hit from memory, and frequency order turns a shared chunk into a prefix") {
  const CacheTrace t = trace_of({{"a", "b"}, {"a", "b"}, {"c", "a"}});
  const PrefillCostModel cost;  // no profile: T(α, β) = β, a token is the unit
  TraceConfig c;
  c.host_bytes = 1 << 20;
  const TraceResult plain = replay_cache_trace(t, cost, c);
  CHECK(plain.requests == 3);
  CHECK(plain.retrieved_chunks == 6);
  CHECK(plain.hit_chunks == 2);  // the second request's a, b; [c, a] shares only the prefix
  CHECK(plain.prompt_tokens == 3 * 230);
  CHECK(plain.computed_tokens == 230 + 20 + 220);
  CHECK(plain.ttft_ms == doctest::Approx(230 + 20 + 220));
  CHECK(plain.full_ttft_ms == doctest::Approx(3 * 230));
  CHECK(plain.prefix_overlap == doctest::Approx((1.0 + 0.0) / 2));
  CHECK(plain.total_overlap == doctest::Approx((1.0 + 0.5) / 2));

  c.freq_order = true;  // a (2 uses) before c (none): [a, c], a hits
  const TraceResult freq = replay_cache_trace(t, cost, c);
  CHECK(freq.hit_chunks == 3);
  CHECK(freq.computed_tokens == 230 + 20 + 120);
  CHECK(freq.prefix_overlap == doctest::Approx((1.0 + 0.5) / 2));
  CHECK(freq.total_overlap == doctest::Approx(plain.total_overlap));  // order does not change sharing

  c.freq_order = false;
  c.host_bytes = 0;  // nothing is kept
  const TraceResult none = replay_cache_trace(t, cost, c);
  CHECK(none.hit_chunks == 0);
  CHECK(none.computed_tokens == 3 * 230);
  CHECK(none.peak_bytes == 0);
}

TEST_CASE("cache trace: reordering groups shared prefixes, and a small budget evicts and is never exceeded") {
  // Input order alternates two chunk sequences; a budget holding one path (prefix + 2 chunks =
  // 210 bytes, not 2 paths) keeps nothing useful in input order, everything useful grouped.
  const CacheTrace t = trace_of({{"a", "b"}, {"x", "y"}, {"a", "b"}, {"x", "y"}});
  const PrefillCostModel cost;
  TraceConfig c;
  c.host_bytes = 300;
  for (auto policy : {CachePolicy::pgdsf, CachePolicy::gdsf, CachePolicy::lru}) {
    CAPTURE(cache_policy_name(policy));
    c.policy = policy;
    c.reorder = false;
    const TraceResult input = replay_cache_trace(t, cost, c);
    CHECK(input.peak_bytes <= 300);
    CHECK(input.evicted > 0);
    CHECK(input.hit_chunks == 0);
    c.reorder = true;
    c.reorder_window = 0;
    const TraceResult grouped = replay_cache_trace(t, cost, c);
    CHECK(grouped.peak_bytes <= 300);
    CHECK(grouped.hit_chunks == 4);  // the second a,b and the second x,y
    CHECK(grouped.prefix_overlap == doctest::Approx((1.0 + 0.0 + 1.0) / 3));
  }
}
