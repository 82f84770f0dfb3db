// Chunk-KV reuse end to end in process, on the default model and testdata/rag-mini: precompute
// into a store, then answer in every mode. prefix must be bit-identical to full; blend with every
// reused token recomputed must match full; reuse must deviate more than blend; missing, corrupt,
// truncated and foreign caches must never be used (same result as computing those chunks).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/eval/metrics.h"
#include "core/format/checksum.h"
#include "core/kv/kv-store.h"
#include "core/kv/kv-tiers.h"
#include "core/model/model.h"
#include "core/rag/answer.h"
#include "core/rag/answer-batch.h"
#include "core/rag/cache-keys.h"
#include "core/rag/cost-profile.h"
#include "core/rag/fusor.h"
#include "core/rag/plan.h"
#include "core/rag/precompute.h"
#include "core/rag/prompt.h"
#include "retrieval/chunker.h"
#include "tests/test-paths.h"
#include "tests/test-rag-mini.h"
#include "tests/test-tempdir.h"

namespace {

namespace fs = std::filesystem;
using namespace ragkv;

using Fixture = test::RagMini;

Fixture& fixture() {
  static Fixture f;
  return f;
}

// A store holding every chunk of the fixture, precomputed once per test binary.
struct StoreDir {
  test::TempDir dir{"rag-store"};
  StoreDir() {
    Fixture& f = fixture();
    const CacheKeys keys(*f.model, *f.format);
    const KvStore store = KvStore::open_for_write(dir.path, keys.store_info());
    const PrecomputeStats st = precompute_chunks(*f.model, *f.format, store, f.all());
    REQUIRE(st.computed == f.chunks.size());
  }
  // A private copy the test may damage, in a TempDir of its own (removed when it goes out of scope).
  test::TempDir copy(const std::string& name) const {
    test::TempDir c(name);
    fs::copy(dir.path, c.path, fs::copy_options::recursive);
    return c;
  }
};

StoreDir& store_dir() {
  static StoreDir s;
  return s;
}

AnswerOptions opts(ReuseMode m, double r = 0.15, int max_tokens = 4) {
  AnswerOptions o;
  o.mode = m;
  o.blend.recompute_ratio = r;
  o.gen.max_tokens = max_tokens;
  return o;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

fs::path chunk_file(const KvStore& store, const Chunk& c) {
  Fixture& f = fixture();
  return store.chunk_path(CacheKeys(*f.model, *f.format).chunk(c.id, f.format->chunk_ids(c)));
}

}  // namespace

TEST_CASE("rag: the prompt lays out prefix, chunks and question, each tokenized alone") {
  Fixture& f = fixture();
  const RagPrompt p = f.format->build(f.pick({1, 0}), "Who?");
  REQUIRE(p.segments.size() == 4);
  CHECK(p.segments[0].ids == f.format->prefix_ids());
  CHECK(p.segments[1].ids == f.format->chunk_ids(f.chunks[1]));
  CHECK(p.segments[2].begin == p.segments[1].end());
  CHECK(p.segments[3].end() == p.n_tokens());
  CHECK(f.format->chat());  // SmolLM2-Instruct: the question closes the user turn
}

TEST_CASE("rag: a prompt is built once, whatever the modes and lookups that take it" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  RagAnswerer ans(*f.model, *f.format, nullptr);
  const std::vector<const Chunk*> ctx = f.pick({0, 1});
  const std::shared_ptr<const RagPrompt> p = ans.prompt(ctx, f.questions[0]);
  CHECK(p->ids == f.format->build(ctx, f.questions[0]).ids);
  CHECK(ans.prompt(ctx, f.questions[0]) == p);  // the same object
  CHECK(ans.prompt_hash(f.questions[0], ctx) == checksum64(p->ids.data(), p->ids.size() * sizeof(int32_t)));
  for (const ReuseMode m : {ReuseMode::full, ReuseMode::reuse}) ans.answer(f.questions[0], ctx, opts(m, 0.15, 1));
  CHECK(ans.prompts_built() == 1);
  // Another question, other chunks, another chunk text under the same id, a history: each its own.
  CHECK(ans.prompt(ctx, f.questions[1])->ids == f.format->build(ctx, f.questions[1]).ids);
  CHECK(ans.prompt(f.pick({1, 0}), f.questions[0])->ids == f.format->build(f.pick({1, 0}), f.questions[0]).ids);
  Chunk edited = *ctx[0];
  edited.text += " More.";
  CHECK(ans.prompt({&edited, ctx[1]}, f.questions[0])->ids == f.format->build({&edited, ctx[1]}, f.questions[0]).ids);
  const std::vector<PastTurn> history = {{ctx, f.questions[1], "Paris"}};
  CHECK(ans.prompt({ctx[1]}, f.questions[0], history)->ids == f.format->build({ctx[1]}, f.questions[0], history).ids);
  CHECK(ans.prompts_built() == 5);
  // Past the memo's size the oldest prompt is built again.
  for (size_t i = 0; i < RagAnswerer::kPromptMemo; ++i) ans.prompt(ctx, "question " + std::to_string(i));
  CHECK(ans.prompt(ctx, f.questions[0]) != p);
  CHECK(ans.prompt(ctx, f.questions[0])->ids == p->ids);
}

TEST_CASE("rag: prefix mode is bit-identical to full" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore store = KvStore::open_for_read(store_dir().dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  KvTiers store_tiers(store);
  RagAnswerer ans(*f.model, *f.format, &store_tiers);
  for (const auto& ctx : {f.pick({0, 1, 2}), f.pick({3, 0, 5})}) {
    const AnswerRecord full = ans.answer(f.questions[0], ctx, opts(ReuseMode::full, 0.15, 12));
    const AnswerRecord pre = ans.answer(f.questions[0], ctx, opts(ReuseMode::prefix, 0.15, 12));
    CHECK(pre.prefill.reused_tokens == int64_t(f.format->prefix_ids().size() + f.format->chunk_ids(*ctx[0]).size()));
    CHECK(pre.cache.exact_hits == 2);
    CHECK(pre.first_logits == full.first_logits);  // exact, not approximate
    CHECK(pre.output_ids == full.output_ids);
    CHECK(pre.prefill.compute_fraction() < 1.0);
  }
}

TEST_CASE("rag: blend recomputing every reused token matches full" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore store = KvStore::open_for_read(store_dir().dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  KvTiers store_tiers(store);
  RagAnswerer ans(*f.model, *f.format, &store_tiers);
  const auto ctx = f.pick({2, 4, 1});
  const AnswerRecord full = ans.answer(f.questions[4], ctx, opts(ReuseMode::full));
  const AnswerRecord all = ans.answer(f.questions[4], ctx, opts(ReuseMode::blend, 1.0));
  // Same tokens and f16 KV, only the grouping of rows into GEMMs differs.
  CHECK(max_abs_diff(all.first_logits, full.first_logits) < 0.02f);
  CHECK(all.output_ids == full.output_ids);
  CHECK(kl_divergence_logits(full.first_logits, all.first_logits) < 1e-5);
}

TEST_CASE("rag: reuse without recompute deviates from full more than blend" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore store = KvStore::open_for_read(store_dir().dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  KvTiers store_tiers(store);
  RagAnswerer ans(*f.model, *f.format, &store_tiers);
  double kl_reuse = 0, kl_blend = 0;
  for (int q : {0, 6, 10}) {
    const auto ctx = f.pick({5, 3, 1, 0});
    const AnswerRecord full = ans.answer(f.questions[size_t(q)], ctx, opts(ReuseMode::full));
    const AnswerRecord reuse = ans.answer(f.questions[size_t(q)], ctx, opts(ReuseMode::reuse));
    const AnswerRecord blend = ans.answer(f.questions[size_t(q)], ctx, opts(ReuseMode::blend));
    kl_reuse += kl_divergence_logits(full.first_logits, reuse.first_logits);
    kl_blend += kl_divergence_logits(full.first_logits, blend.first_logits);
    // Compute scales with the active tokens: the question, plus ~15 % of the repositioned chunks.
    CHECK(reuse.prefill.compute_fraction() < 0.2);
    CHECK(blend.prefill.compute_fraction() > reuse.prefill.compute_fraction());
    CHECK(blend.prefill.compute_fraction() < 0.45);
    CHECK(blend.cache.hits() == 5);  // prefix + 4 chunks
    CHECK(blend.cache.exact_hits == 2);
  }
  MESSAGE("sum KL(full || reuse) = " << kl_reuse << ", KL(full || blend) = " << kl_blend);
  CHECK(kl_reuse > 1.3 * kl_blend);  // measured 0.55 vs 0.31 on these short passages
}

TEST_CASE("rag: KV from the host and device tiers gives the disk tier's answer, counted per tier" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore store = KvStore::open_for_read(store_dir().dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  const CacheKeys keys(*f.model, *f.format);
  const auto ctx = f.pick({3, 1, 4});
  KvTiers tiers(store);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  for (ReuseMode m : {ReuseMode::prefix, ReuseMode::blend}) {
    const AnswerRecord disk = ans.answer(f.questions[5], ctx, opts(m));
    const int cached = m == ReuseMode::prefix ? 2 : 4;  // prefix: [prefix][chunk 1]; blend: all but the question
    CHECK(disk.cache.disk_hits == cached);
    const RagPrompt prompt = f.format->build(ctx, f.questions[5]);
    for (size_t s = 0; s + 1 < prompt.segments.size(); ++s) tiers.place(keys.segment(prompt.segments[s]), KvTier::host);
    const AnswerRecord host = ans.answer(f.questions[5], ctx, opts(m));
    CHECK(host.cache.host_hits == cached);
    CHECK(host.cache.disk_hits == 0);
    for (size_t s = 0; s + 1 < prompt.segments.size(); ++s)
      tiers.place(keys.segment(prompt.segments[s]), KvTier::device, f.backend.get());
    const AnswerRecord dev = ans.answer(f.questions[5], ctx, opts(m));
    CHECK(dev.cache.device_hits == cached);
    CHECK(dev.metrics()["cache_hits"]["device"] == cached);
    // The same KV whichever tier it came from: the same logits, bit for bit.
    CHECK(host.first_logits == disk.first_logits);
    CHECK(dev.first_logits == disk.first_logits);
    CHECK(dev.output_ids == disk.output_ids);
    for (size_t s = 0; s + 1 < prompt.segments.size(); ++s) tiers.drop(keys.segment(prompt.segments[s]));
  }
}

TEST_CASE("rag: missing, corrupt and truncated chunk caches are recomputed, never used" * doctest::test_suite("check")) {
  Fixture& f = fixture();
  const std::string fp = CacheKeys(*f.model, *f.format).model_fingerprint();
  const auto ctx = f.pick({0, 1, 2, 3});
  // Reference: chunks 2 and 3 have no cache at all.
  const test::TempDir missing_copy = store_dir().copy("rag-missing");
  const fs::path& missing = missing_copy.path;
  {
    const KvStore s = KvStore::open_for_read(missing, fp);
    fs::remove(chunk_file(s, f.chunks[2]));
    fs::remove(chunk_file(s, f.chunks[3]));
  }
  const KvStore s_missing = KvStore::open_for_read(missing, fp);
  KvTiers s_missing_tiers(s_missing);
  RagAnswerer a_missing(*f.model, *f.format, &s_missing_tiers);
  const AnswerRecord ref = a_missing.answer(f.questions[2], ctx, opts(ReuseMode::blend));
  CHECK(ref.cache.misses == 2);
  CHECK(ref.cache.bad == 0);

  // Chunk 2 has a flipped byte in a middle layer (found while loading), chunk 3 is cut short
  // (found at open).
  const test::TempDir bad_copy = store_dir().copy("rag-bad");
  const fs::path& bad = bad_copy.path;
  {
    const KvStore s = KvStore::open_for_read(bad, fp);
    const fs::path p2 = chunk_file(s, f.chunks[2]), p3 = chunk_file(s, f.chunks[3]);
    std::fstream io(p2, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(io.tellg());
    io.seekp(size / 2);
    char c = 0;
    io.seekg(size / 2);
    io.get(c);
    io.seekp(size / 2);
    io.put(char(c ^ 0x5a));
    io.close();
    fs::resize_file(p3, fs::file_size(p3) - 100);
  }
  const KvStore s_bad = KvStore::open_for_read(bad, fp);
  KvTiers s_bad_tiers(s_bad);
  RagAnswerer a_bad(*f.model, *f.format, &s_bad_tiers);
  for (ReuseMode m : {ReuseMode::blend, ReuseMode::reuse}) {
    const AnswerRecord r = a_bad.answer(f.questions[2], ctx, opts(m));
    CHECK(r.cache.bad == 2);
    CHECK(r.cache.hits() == 3);
    if (m == ReuseMode::blend) {
      CHECK(r.first_logits == ref.first_logits);  // exactly as if the bad files did not exist
      CHECK(r.output_ids == ref.output_ids);
    }
  }
}

TEST_CASE("rag: a store of another model is never used" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const std::string fp = CacheKeys(*f.model, *f.format).model_fingerprint();
  const test::TempDir other_copy = store_dir().copy("rag-foreign");
  const fs::path& other = other_copy.path;
  {
    auto j = nlohmann::json::parse(std::ifstream(other / "store.json"));
    j["model_fingerprint"] = "llama-0000000000000000";
    std::ofstream(other / "store.json") << j.dump();
  }
  const KvStore s = KvStore::open_for_read(other, fp);
  CHECK(s.foreign());
  KvTiers s_tiers(s);
  RagAnswerer with(*f.model, *f.format, &s_tiers), without(*f.model, *f.format, nullptr);
  const auto ctx = f.pick({4, 5});
  const AnswerRecord a = with.answer(f.questions[8], ctx, opts(ReuseMode::blend));
  const AnswerRecord b = without.answer(f.questions[8], ctx, opts(ReuseMode::blend));
  CHECK(a.cache.hits() == 0);
  CHECK(a.cache.misses == 3);
  CHECK(a.first_logits == b.first_logits);
}

TEST_CASE("rag: precompute resumes without redoing stored chunks" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  test::TempDir dir("rag-resume");
  const CacheKeys keys(*f.model, *f.format);
  const KvStore store = KvStore::open_for_write(dir.path, keys.store_info());
  const auto first = precompute_chunks(*f.model, *f.format, store, f.pick({0, 1}));
  CHECK(first.computed == 2);
  const auto again = precompute_chunks(*f.model, *f.format, store, f.pick({0, 1, 2}));
  CHECK(again.skipped == 2);
  CHECK(again.computed == 1);
  CHECK(store.usage().first == 4);  // prefix + 3 chunks
  // The stored bytes are the reference store's (same computation, same bits).
  const KvStore ref = KvStore::open_for_read(store_dir().dir.path, keys.model_fingerprint());
  for (int i : {0, 1, 2}) {
    std::ifstream a(chunk_file(store, f.chunks[size_t(i)]), std::ios::binary), b(chunk_file(ref, f.chunks[size_t(i)]), std::ios::binary);
    const std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
    CHECK(sa == sb);
  }
}

namespace {

// Managed tiers over a store (RAGCache's cache manager): generous budgets unless given.
KvTierConfig tier_config(uint64_t device, uint64_t host, uint64_t disk, CachePolicy p = CachePolicy::pgdsf) {
  KvTierConfig c;
  c.policy = p;
  c.budgets.bytes = {device, host, disk};
  return c;
}

AnswerOptions recorded(ReuseMode m, int max_tokens = 6) {
  AnswerOptions o = opts(m, 0.15, max_tokens);
  o.record_in_tiers = true;
  return o;
}

size_t chain_files(const fs::path& store) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(store / "kv")) n += e.path().filename().string().ends_with(".chain.rkv");
  return n;
}

}  // namespace

TEST_CASE("rag: a knowledge-tree path is an exact prefix: prefix over it is bit-identical to full, from memory and from disk" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const test::TempDir copy = store_dir().copy("rag-tree");
  const KvStore store = KvStore::open_for_read(copy.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  const uint64_t big = uint64_t(1) << 32;
  const auto ctx = f.pick({0, 1, 2});
  {
    KvTiers tiers(store, tier_config(big, big, 0), *f.backend);
    RagAnswerer ans(*f.model, *f.format, &tiers);
    const AnswerRecord first = ans.answer(f.questions[0], ctx, recorded(ReuseMode::prefix));
    CHECK(first.exact_path_chunks == 1);  // chunk 1's canonical cache; chunks 2 and 3 computed, admitted
    CHECK(first.cache.disk_hits == 2);
    CHECK(tiers.tree()->stats(KvTier::device).nodes == 4);  // prefix, chunk 1, [1]→2, [1,2]→3
    for (int q : {1, 3}) {
      const AnswerRecord pre = ans.answer(f.questions[size_t(q)], ctx, recorded(ReuseMode::prefix, 12));
      const AnswerRecord full = ans.answer(f.questions[size_t(q)], ctx, opts(ReuseMode::full, 0.15, 12));
      CHECK(pre.exact_path_chunks == 3);
      CHECK(pre.cache.device_hits == 4);
      CHECK(pre.prefill.reused_tokens == f.format->build(ctx, f.questions[size_t(q)]).segments.back().begin);
      CHECK(pre.first_logits == full.first_logits);  // bit for bit
      CHECK(pre.output_ids == full.output_ids);
    }
    // Another chunk 3 after the same [1, 2]: the path covers two chunks.
    const AnswerRecord fork = ans.answer(f.questions[2], f.pick({0, 1, 3}), recorded(ReuseMode::prefix));
    CHECK(fork.exact_path_chunks == 2);
    CHECK(chain_files(copy.path) == 0);  // no disk budget: nothing written
  }
  {
    // No memory tiers, a disk budget: computed chain nodes go straight to the store.
    KvTiers tiers(store, tier_config(0, 0, big), *f.backend);
    RagAnswerer ans(*f.model, *f.format, &tiers);
    ans.answer(f.questions[0], ctx, recorded(ReuseMode::prefix));
    CHECK(chain_files(copy.path) == 2);
  }
  // A later run finds them on disk (headers listed and verified), and they are exact.
  KvTiers tiers(store, tier_config(0, 0, big), *f.backend);
  CHECK(tiers.tree()->stats(KvTier::disk).nodes == 2);
  CHECK(tiers.bad_files() == 0);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  const AnswerRecord pre = ans.answer(f.questions[6], ctx, recorded(ReuseMode::prefix, 12));
  const AnswerRecord full = ans.answer(f.questions[6], ctx, opts(ReuseMode::full, 0.15, 12));
  CHECK(pre.exact_path_chunks == 3);
  CHECK(pre.cache.disk_hits == 4);
  CHECK(pre.first_logits == full.first_logits);
  CHECK(pre.output_ids == full.output_ids);

  // A chain file with a flipped byte is recomputed, never used: the answer stays full's.
  for (const auto& e : fs::directory_iterator(copy.path / "kv")) {
    if (!e.path().filename().string().ends_with(".chain.rkv")) continue;
    std::fstream io(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(fs::file_size(e.path()) - 20));
    io.put('\x7f');
  }
  KvTiers damaged(store, tier_config(0, 0, big), *f.backend);
  RagAnswerer again(*f.model, *f.format, &damaged);
  const AnswerRecord fixed = again.answer(f.questions[6], ctx, opts(ReuseMode::prefix, 0.15, 12));
  CHECK(fixed.cache.bad >= 1);
  CHECK(fixed.first_logits == full.first_logits);
  CHECK(fixed.output_ids == full.output_ids);
}

TEST_CASE("rag: blend, craft and auto reuse the tree path as is: its KV rows are full's, bit for bit" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const test::TempDir copy = store_dir().copy("rag-tree-sparse");
  const KvStore store = KvStore::open_for_read(copy.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  const uint64_t big = uint64_t(1) << 32;
  KvTiers tiers(store, tier_config(big, big, 0), *f.backend);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  ans.answer(f.questions[0], f.pick({4, 2, 5}), recorded(ReuseMode::prefix));  // the tree gets [4, 2, 5]
  const auto ctx = f.pick({4, 2, 5, 1});  // its path, then chunk 1 repositioned
  const RagPrompt prompt = f.format->build(ctx, f.questions[7]);
  const CacheKeys keys(*f.model, *f.format);
  const int L = f.model->config().n_layer;
  KvCache full_kv = f.model->new_kv_cache(prompt.n_tokens());
  Workspace ws;
  prefill_prompt(*f.model, prompt, plan_prefill(prompt, ReuseMode::full, BlendParams{}, L, {}), full_kv, ws);
  const int64_t span = prompt.segments[4].begin;  // prefix + the three path chunks
  const int64_t d = f.model->config().kv_dim();
  auto rows = [&](const KvCache& kv, int l, bool k) {
    std::vector<uint16_t> out(size_t(span * d));
    f.backend->download((k ? kv.k : kv.v)[size_t(l)].slice_rows(0, span), out.data());
    return out;
  };
  const VariantSource variants = tier_variants(keys, &tiers);
  for (ReuseMode m : {ReuseMode::blend, ReuseMode::craft, ReuseMode::auto_}) {
    CAPTURE(reuse_mode_name(m));
    const PrefillPlan plan =
        plan_prefill(prompt, m, BlendParams{}, L, tier_lookup(keys, &tiers), &variants, CraftParams{}, tier_chain_lookup(keys, &tiers));
    CHECK(plan.exact_path == 4);
    CHECK(plan.counts.exact_hits == 4);
    CHECK(plan.counts.device_hits == 4);
    KvCache kv = f.model->new_kv_cache(prompt.n_tokens());
    prefill_prompt(*f.model, prompt, plan, kv, ws);
    for (int l = 0; l < L; ++l) {
      REQUIRE(rows(kv, l, true) == rows(full_kv, l, true));
      REQUIRE(rows(kv, l, false) == rows(full_kv, l, false));
    }
  }
}

TEST_CASE("rag: managed host memory never holds more than its budget, for every policy, and its hits are counted" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore store = KvStore::open_for_read(store_dir().dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  const uint64_t budget = uint64_t(8) << 20;  // about two chunks of the small model
  for (CachePolicy p : {CachePolicy::pgdsf, CachePolicy::gdsf, CachePolicy::lru}) {
    CAPTURE(cache_policy_name(p));
    KvTiers tiers(store, tier_config(0, budget, 0, p), *f.backend);
    RagAnswerer ans(*f.model, *f.format, &tiers);
    int host_hits = 0;
    for (const auto& ctx : {f.pick({0, 1}), f.pick({2, 3}), f.pick({0, 1}), f.pick({4, 5}), f.pick({0, 1})}) {
      const AnswerRecord r = ans.answer(f.questions[1], ctx, recorded(ReuseMode::prefix, 1));
      host_hits += r.cache.host_hits;
      CHECK(r.cache.hits() == r.cache.device_hits + r.cache.host_hits + r.cache.disk_hits);
      CHECK(tiers.bytes(KvTier::host) <= budget);
      CHECK(tiers.bytes(KvTier::host) == tiers.tree()->bytes(KvTier::host));  // the copies are what the tree says
      CHECK(tiers.bytes(KvTier::device) == 0);
    }
    CHECK(host_hits > 0);
    CHECK(tiers.tree()->stats(KvTier::host).evicted > 0);
  }
}

TEST_CASE("rag: the prefill cost profile is measured on a grid, written, and read back for the same model and backend" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const test::TempDir dir("rag-cost");
  const fs::path path = dir.path / "cost.json";
  const std::string fp = CacheKeys(*f.model, *f.format).model_fingerprint();
  bool measured = false;
  ProfileGrid grid;  // small, for the test's time
  grid.alphas = {0, 64};
  grid.betas = {8, 64};
  grid.repetitions = 1;
  const PrefillCostModel a = load_or_profile_prefill_cost(path, *f.model, fp, &measured, grid);
  CHECK(measured);
  REQUIRE(a.has_grid());
  // Measured times, one repetition each: positive, but their order is a benchmark's question (on a
  // loaded machine 8 tokens measured slower than 64 once), not this test's.
  CHECK(a.estimate_ms(0, 64) > 0);
  CHECK(a.estimate_ms(0, 8) > 0);
  const PrefillCostModel b = load_or_profile_prefill_cost(path, *f.model, fp, &measured, grid);
  CHECK_FALSE(measured);
  CHECK(b.to_json() == a.to_json());
  // Another model's profile is measured anew; a damaged file is an error naming it.
  load_or_profile_prefill_cost(path, *f.model, fp + "x", &measured, grid);
  CHECK(measured);
  std::ofstream(path) << "{not json";
  CHECK_THROWS_WITH_AS(load_or_profile_prefill_cost(path, *f.model, fp, nullptr, grid), doctest::Contains("cost.json"), Error);
}

TEST_CASE("rag: a computed chunk prefix enters the tree only as far as CRAFT's promotion marks it" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore store = KvStore::open_for_read(store_dir().dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  const uint64_t big = uint64_t(1) << 32;
  KvTiers tiers(store, tier_config(0, big, 0), *f.backend);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  const auto ctx = f.pick({0, 1, 2});
  AnswerOptions o = recorded(ReuseMode::prefix, 1);
  o.promote = {1, 1, 0};  // chunks 1 and 2 reached the threshold, chunk 3 not yet
  ans.answer(f.questions[0], ctx, o);
  const std::string p = kPrefixChunkId;
  auto held = [&](const std::vector<std::string>& path) {
    const int n = tiers.tree()->find(path);
    return n >= 0 && tiers.tree()->node(n).live && tiers.tree()->node(n).in[size_t(KvTier::host)];
  };
  CHECK(held({p, ctx[0]->id}));
  CHECK(held({p, ctx[0]->id, ctx[1]->id}));
  CHECK_FALSE(held({p, ctx[0]->id, ctx[1]->id, ctx[2]->id}));
  o.promote = {1, 1, 1};  // now it has
  const AnswerRecord r = ans.answer(f.questions[1], ctx, o);
  CHECK(r.exact_path_chunks == 2);
  CHECK(held({p, ctx[0]->id, ctx[1]->id, ctx[2]->id}));
}

TEST_CASE("rag: answers decoded together (AnswerBatch) equal each answered alone, joining and leaving" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore store = KvStore::open_for_read(store_dir().dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  KvTiers tiers(store);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  struct Job {
    ReuseMode mode;
    size_t question;
    std::vector<const Chunk*> ctx;
    int max_tokens;
  };
  const std::vector<Job> jobs = {{ReuseMode::full, 0, f.pick({0, 1, 2}), 12}, {ReuseMode::blend, 5, f.pick({3, 1, 4}), 3},
                                 {ReuseMode::reuse, 6, f.pick({5, 3, 1, 0}), 16}, {ReuseMode::prefix, 10, f.pick({2, 4}), 8},
                                 {ReuseMode::blend, 1, f.pick({1, 5}), 1}};
  std::vector<AnswerRecord> alone;
  for (const Job& j : jobs) alone.push_back(ans.answer(f.questions[j.question], j.ctx, opts(j.mode, 0.15, j.max_tokens)));
  // Three in flight: the later jobs join as earlier ones finish.
  AnswerBatch batch(ans, 3);
  std::vector<std::optional<AnswerRecord>> together(jobs.size());
  size_t next = 0, finished = 0;
  while (finished < jobs.size()) {
    for (; next < jobs.size() && batch.can_admit(); ++next)
      batch.admit(next, f.questions[jobs[next].question], jobs[next].ctx, opts(jobs[next].mode, 0.15, jobs[next].max_tokens));
    for (auto& [tag, r] : batch.step()) {
      REQUIRE_FALSE(together.at(tag));
      together[tag] = std::move(r);
      ++finished;
    }
  }
  CHECK(batch.empty());
  CHECK(batch.steps() > 0);
  CHECK(batch.sequence_steps() > batch.steps());  // some steps decoded more than one answer
  for (size_t i = 0; i < jobs.size(); ++i) {
    CAPTURE(i);
    REQUIRE(together[i]);
    CHECK(together[i]->output_ids == alone[i].output_ids);
    CHECK(together[i]->answer == alone[i].answer);
    CHECK(together[i]->first_logits == alone[i].first_logits);
    CHECK(together[i]->mode == alone[i].mode);
    CHECK(together[i]->prefill.reused_tokens == alone[i].prefill.reused_tokens);
    CHECK(together[i]->output_ids.size() <= size_t(jobs[i].max_tokens));
  }
  CHECK_THROWS_AS(AnswerBatch(ans, 0), Error);
}

TEST_CASE("rag: a conversation's later turn continues its earlier turns, and prefix stays exact over it" * doctest::test_suite("real-model")) {
  Fixture& f = fixture();
  const KvStore store = KvStore::open_for_read(store_dir().dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  KvTiers tiers(store);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  const std::vector<PastTurn> history = {{f.pick({0, 1}), f.questions[0], "Warsaw"}, {{}, f.questions[1], "1867"}};
  const auto added = f.pick({2});
  const RagPrompt p = f.format->build(added, f.questions[2], history);
  using K = PromptSegment::Kind;
  std::vector<K> kinds;
  for (const PromptSegment& s : p.segments) kinds.push_back(s.kind);
  CHECK(kinds == std::vector<K>{K::prefix, K::chunk, K::chunk, K::turn, K::turn, K::chunk, K::suffix});
  // A turn segment: the earlier question as asked, then its answer and the next user turn.
  std::vector<int32_t> turn1 = f.format->suffix_ids(f.questions[0]);
  const std::vector<int32_t> close1 = f.format->turn_close_ids("Warsaw", /*chunks_follow=*/false);
  turn1.insert(turn1.end(), close1.begin(), close1.end());
  CHECK(p.segments[3].ids == turn1);
  const std::string text = f.model->tokenizer().decode(p.segments[4].ids);
  CHECK(text.find("1867") != std::string::npos);
  CHECK(text.ends_with("user\nPassages:\n"));
  const auto im_end = f.model->tokenizer().encode("<|im_end|>", /*parse_special=*/true);
  REQUIRE(im_end.size() == 1);  // the assistant's turn is closed with the template's own token
  CHECK(std::count(p.segments[4].ids.begin(), p.segments[4].ids.end(), im_end[0]) == 2);  // the question's turn and the answer's
  CHECK(p.segments.back().ids == f.format->suffix_ids(f.questions[2]));

  AnswerOptions full = opts(ReuseMode::full, 0.15, 6), prefix = opts(ReuseMode::prefix, 0.15, 6),
                blend = opts(ReuseMode::blend, 0.15, 6);
  full.history = prefix.history = blend.history = history;
  const AnswerRecord rf = ans.answer(f.questions[2], added, full);
  const AnswerRecord rp = ans.answer(f.questions[2], added, prefix);
  const AnswerRecord rb = ans.answer(f.questions[2], added, blend);
  CHECK(rf.prefill.prompt_tokens == p.n_tokens());
  CHECK(rp.first_logits == rf.first_logits);  // the exact path ends at the first turn: still exact
  CHECK(rp.output_ids == rf.output_ids);
  CHECK(rp.exact_path_chunks == 1);
  CHECK(rb.cache.hits() == 4);  // prefix and the three chunks; the turns are computed, not missed
  CHECK(rb.cache.misses == 0);
  CHECK(rb.prefill.reused_tokens < rb.prefill.prompt_tokens);
  CHECK(rb.chunk_ids == std::vector<std::string>{f.chunks[2].id});
}
