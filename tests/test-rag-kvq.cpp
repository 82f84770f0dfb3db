// Quantised chunk caches end to end on the default model and testdata/rag-mini: the same chunks
// precomputed into an f16, an 8-bit and a 4-bit store, then answered from each. reuse and blend
// from a quantised store stay close to the same mode from the f16 store (the first token's KL
// bounded per bit width, 8 bits closer than 4); a quantised first chunk makes prefix approximate
// but close; the host and device tiers decode to the disk tier's KV bit for bit; a damaged
// quantised file is recomputed, never used.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend/cpu-backend.h"
#include "core/eval/metrics.h"
#include "core/kv/kv-store.h"
#include "core/kv/kv-tiers.h"
#include "core/model/model.h"
#include "core/rag/answer.h"
#include "core/rag/cache-keys.h"
#include "core/rag/precompute.h"
#include "core/rag/prompt.h"
#include "retrieval/chunker.h"
#include "tests/test-paths.h"
#include "tests/test-rag-mini.h"
#include "tests/test-tempdir.h"

namespace {

namespace fs = std::filesystem;
using namespace ragkv;

struct Fixture : test::RagMini {
  test::TempDir dir{"rag-kvq"};
  // dir/<dtype>: every chunk precomputed in that encoding (once per test binary run).
  fs::path store(int bits) {
    const KvEncoding e = KvEncoding::from_bits(bits);
    const fs::path p = dir.path / e.name();
    if (!fs::exists(p / "store.json")) {
      KvStoreInfo info = CacheKeys(*model, *format).store_info();
      info.dtype = e.name();
      const KvStore s = KvStore::open_for_write(p, info);
      REQUIRE(precompute_chunks(*model, *format, s, all()).computed == chunks.size());
    }
    return p;
  }
  KvStore open(int bits) { return KvStore::open_for_read(store(bits), CacheKeys(*model, *format).model_fingerprint()); }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// Top-two logit margins below this are near ties: f32 rounding anywhere may flip their argmax.
constexpr double kNearTie = 0.1;

// The largest logit minus the second largest.
double top_two_margin(const std::vector<float>& logits) {
  float a = -std::numeric_limits<float>::infinity(), b = a;
  for (const float v : logits) {
    if (v > a) b = a, a = v;
    else if (v > b) b = v;
  }
  return double(a) - double(b);
}

AnswerOptions opts(ReuseMode m, int max_tokens = 4) {
  AnswerOptions o;
  o.mode = m;
  o.blend.recompute_ratio = 0.15;
  o.gen.max_tokens = max_tokens;
  return o;
}

}  // namespace

TEST_CASE("rag kvq: 8- and 4-bit stores answer reuse and blend close to the f16 store" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore s16 = f.open(16), s8 = f.open(8), s4 = f.open(4);
  KvTiers t16(s16), t8(s8), t4(s4);
  RagAnswerer a16(*f.model, *f.format, &t16), a8(*f.model, *f.format, &t8), a4(*f.model, *f.format, &t4);
  // Stored bytes: 0.56x and 0.31x for long chunks; these short passages (about 150 tokens) end in
  // a partial K group, and each store holds the f16 prefix file (measured 0.60x and 0.37x).
  const double r8 = double(s8.usage().second) / double(s16.usage().second),
               r4 = double(s4.usage().second) / double(s16.usage().second);
  MESSAGE("store bytes vs f16: q8 " << r8 << ", q4 " << r4);
  CHECK(r8 < 0.62);
  CHECK(r4 < 0.39);

  const std::vector<std::pair<int, std::vector<const Chunk*>>> prompts = {
      {0, f.pick({5, 3, 1, 0})}, {4, f.pick({2, 4, 1})}, {6, f.pick({0, 1, 2, 3})}, {10, f.pick({3, 0, 5})}};
  double kl_q[2] = {0, 0}, max_kl_q[2] = {0, 0};  // KL(f16 store's mode || quantised store's mode)
  double kl_full[3] = {0, 0, 0};                  // KL(full || blend) from the f16, q8, q4 stores
  int agree[2] = {0, 0}, n = 0;
  int clear = 0, clear_agree8 = 0;  // answers whose f16 first token is no near tie, and q8's agreement there
  std::vector<double> margins;      // the f16 store's top-two first-token logit margins
  for (const auto& [q, ctx] : prompts)
    for (ReuseMode m : {ReuseMode::reuse, ReuseMode::blend}) {
      const std::string& question = f.questions[size_t(q)];
      const AnswerRecord b16 = a16.answer(question, ctx, opts(m));
      const AnswerRecord b8 = a8.answer(question, ctx, opts(m)), b4 = a4.answer(question, ctx, opts(m));
      CHECK(b8.cache.hits() == b16.cache.hits());
      CHECK(b4.cache.bad == 0);
      CHECK(b4.prefill.reused_tokens == b16.prefill.reused_tokens);  // the same plan, other KV values
      ++n;
      const double margin = top_two_margin(b16.first_logits);
      margins.push_back(margin);
      if (margin >= kNearTie) {
        ++clear;
        clear_agree8 += argmax(b8.first_logits) == argmax(b16.first_logits);
      }
      int i = 0;
      for (const AnswerRecord* b : {&b8, &b4}) {
        const double kl = kl_divergence_logits(b16.first_logits, b->first_logits);
        kl_q[i] += kl;
        max_kl_q[i] = std::max(max_kl_q[i], kl);
        agree[i] += argmax(b->first_logits) == argmax(b16.first_logits);
        ++i;
      }
      if (m == ReuseMode::blend) {
        const AnswerRecord full = a16.answer(question, ctx, opts(ReuseMode::full));
        kl_full[0] += kl_divergence_logits(full.first_logits, b16.first_logits);
        kl_full[1] += kl_divergence_logits(full.first_logits, b8.first_logits);
        kl_full[2] += kl_divergence_logits(full.first_logits, b4.first_logits);
      }
    }
  MESSAGE("first-token KL vs the f16 store's answer, mean (max): q8 " << kl_q[0] / n << " (" << max_kl_q[0] << "), q4 "
                                                                      << kl_q[1] / n << " (" << max_kl_q[1] << ")");
  MESSAGE("first-token agreement with the f16 store's answer: q8 " << agree[0] << "/" << n << ", q4 " << agree[1] << "/" << n);
  MESSAGE("blend's summed KL to full: f16 store " << kl_full[0] << ", q8 " << kl_full[1] << ", q4 " << kl_full[2]);
  std::string ms;
  for (const double m : margins) {
    ms += ' ';
    ms += std::to_string(m);
  }
  MESSAGE("the f16 store's top-two first-token margins:" << ms);
  // Bounds (nats), stated from what these 8 answers measured (q8: mean 0.0035, max 0.028, 8/8 first
  // tokens the f16 store's; q4: mean 0.068, max 0.38, 6/8): the mean first-token KL to the f16
  // store's answer under 0.02 at 8 bits and 0.25 at 4 bits — several times the measurement, far
  // under what a broken decode gives (whole nats) — 8 bits keeping every first token that is no
  // near tie (the f16 store's top two logits at least kNearTie apart: one answer here is closer,
  // and f32 rounding elsewhere — the sanitizer build, SGEMM tile sizes — flips it either way), 4
  // bits at least half. SQuAD 200 figures with intervals: bench/results/README.md.
  CHECK(kl_q[0] / n < 0.02);
  CHECK(kl_q[1] / n < 0.25);
  CHECK(clear >= n - 2);  // the near-tie exception stays an exception
  CHECK(clear_agree8 == clear);
  CHECK(2 * agree[1] >= n);
  CHECK(kl_q[0] < kl_q[1]);  // more bits, closer
  CHECK(kl_q[0] > 0);  // the 8-bit caches are really other values (the measurement can see them)
}

TEST_CASE("rag kvq: prefix over a quantised first chunk is close to full, the prefix file itself is f16" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore s4 = f.open(4);
  const CacheKeys keys(*f.model, *f.format);
  CHECK(ChunkKvReader(s4.chunk_path(keys.prefix()), keys.prefix()).encoding().bits == 16);
  KvTiers tiers(s4);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  const auto ctx = f.pick({0, 1, 2});
  const AnswerRecord full = ans.answer(f.questions[0], ctx, opts(ReuseMode::full, 12));
  const AnswerRecord pre = ans.answer(f.questions[0], ctx, opts(ReuseMode::prefix, 12));
  CHECK(pre.cache.exact_hits == 2);
  const double kl = kl_divergence_logits(full.first_logits, pre.first_logits);
  MESSAGE("prefix over a 4-bit first chunk: first-token KL to full " << kl);
  CHECK(kl > 0);      // not bit-identical: documented (README, Store)
  CHECK(kl < 0.05);
}

TEST_CASE("rag kvq: host and device tiers decode to the disk tier's KV, bit for bit" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore s8 = f.open(8);
  const CacheKeys keys(*f.model, *f.format);
  const auto ctx = f.pick({3, 1, 4});
  KvTiers tiers(s8);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  const AnswerRecord disk = ans.answer(f.questions[5], ctx, opts(ReuseMode::blend));
  CHECK(disk.cache.disk_hits == 4);
  const RagPrompt prompt = f.format->build(ctx, f.questions[5]);
  for (size_t s = 0; s + 1 < prompt.segments.size(); ++s) tiers.place(keys.segment(prompt.segments[s]), KvTier::host);
  const AnswerRecord host = ans.answer(f.questions[5], ctx, opts(ReuseMode::blend));
  CHECK(host.cache.host_hits == 4);
  for (size_t s = 0; s + 1 < prompt.segments.size(); ++s)
    tiers.place(keys.segment(prompt.segments[s]), KvTier::device, f.backend.get());
  const AnswerRecord dev = ans.answer(f.questions[5], ctx, opts(ReuseMode::blend));
  CHECK(dev.cache.device_hits == 4);
  CHECK(host.first_logits == disk.first_logits);
  CHECK(dev.first_logits == disk.first_logits);
}

TEST_CASE("rag kvq: a damaged quantised cache is recomputed, never used" * doctest::test_suite("check")) {
  Fixture& f = fixture();
  const std::string fp = CacheKeys(*f.model, *f.format).model_fingerprint();
  const CacheKeys keys(*f.model, *f.format);
  const auto ctx = f.pick({0, 1, 2, 3});
  auto chunk_file = [&](const KvStore& s, int i) {
    return s.chunk_path(keys.chunk(f.chunks[size_t(i)].id, f.format->chunk_ids(f.chunks[size_t(i)])));
  };
  // Reference: chunk 2 has no cache.
  test::TempDir missing("rag-kvq-missing"), bad("rag-kvq-bad");
  fs::copy(f.store(4), missing.path, fs::copy_options::recursive);
  fs::copy(f.store(4), bad.path, fs::copy_options::recursive);
  fs::remove(chunk_file(KvStore::open_for_read(missing.path, fp), 2));
  {  // a flipped byte in the middle of chunk 2's 4-bit file (a layer block)
    const fs::path p = chunk_file(KvStore::open_for_read(bad.path, fp), 2);
    std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
    const auto mid = std::streamoff(fs::file_size(p) / 2);
    io.seekg(mid);
    char c = 0;
    io.get(c);
    io.seekp(mid);
    io.put(char(c ^ 0x21));
  }
  const KvStore s_missing = KvStore::open_for_read(missing.path, fp), s_bad = KvStore::open_for_read(bad.path, fp);
  KvTiers t_missing(s_missing), t_bad(s_bad);
  RagAnswerer a_missing(*f.model, *f.format, &t_missing), a_bad(*f.model, *f.format, &t_bad);
  const AnswerRecord ref = a_missing.answer(f.questions[2], ctx, opts(ReuseMode::blend));
  const AnswerRecord r = a_bad.answer(f.questions[2], ctx, opts(ReuseMode::blend));
  CHECK(ref.cache.misses == 1);
  CHECK(r.cache.bad == 1);
  CHECK(r.first_logits == ref.first_logits);  // exactly as if the damaged file did not exist
  CHECK(r.output_ids == ref.output_ids);
  CHECK_FALSE(s_bad.has_valid(keys.chunk(f.chunks[2].id, f.format->chunk_ids(f.chunks[2]))));  // precompute rewrites it
}
