// Cache-Craft (core/rag/variant-choice.h, core/rag/focused-chunks.h, core/rag/variant-compute.h, the craft plan
// and variants in the store) against values worked out by hand from the paper's definitions
// (cache-craft.txt Eq. 6–14, Algorithm 1), without a model.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/kv/chunk-kv-file.h"
#include "core/kv/kv-store.h"
#include "core/kv/segment-kv.h"
#include "core/kv/variant-ledger.h"
#include "core/eval/alpha-fit.h"
#include "core/rag/focused-chunks.h"
#include "core/rag/mode-spec.h"
#include "core/rag/plan.h"
#include "core/rag/variant-choice.h"
#include "core/rag/variant-compute.h"
#include "tests/test-tempdir.h"

namespace {

using namespace ragkv;
using Ids = std::vector<std::string>;

VariantStats stats_of(float cci, std::vector<float> inter, std::vector<uint32_t> ranked = {}) {
  VariantStats s;
  s.cci = cci;
  s.inter = std::move(inter);
  s.ranked = std::move(ranked);
  return s;
}

ChunkKvMeta key(const std::string& chunk, Ids context, int32_t first_pos = 4, uint32_t n_tokens = 6) {
  ChunkKvMeta m;
  m.model_fingerprint = std::string(1, 'm');  // (= "m": GCC 12 warns falsely, -Wrestrict)
  m.chunk_id = chunk;
  m.prefix = "canonical:0";
  m.n_layer = 1;
  m.n_kv_head = 1;
  m.head_dim = 2;
  m.n_tokens = n_tokens;
  m.token_hash = 42;
  m.first_pos = first_pos;
  m.context = std::move(context);
  return m;
}

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("craft: CCI is the sigmoid of inter over intra attention (Eq. 11)") {
  CHECK(cache_context_impact(0.0, 0.3) == doctest::Approx(0.5));          // nothing attended outside
  CHECK(cache_context_impact(0.2, 0.2) == doctest::Approx(0.7310586));   // 1 / (1 + e^-1)
  CHECK(cache_context_impact(0.1, 0.4) == doctest::Approx(0.5621765));   // 1 / (1 + e^-0.25)
  CHECK(cache_context_impact(0.3, 0.0) == doctest::Approx(1.0));         // only outside
}

TEST_CASE("craft: prefix overlap beta weighs the shared context chunks by their inter-attention (Eq. 6)") {
  const Ids old_ctx{"A", "B", "C"};
  const std::vector<float> inter{3, 1, 4};
  CHECK(prefix_overlap(old_ctx, inter, {"B", "X"}) == doctest::Approx(1.0 / 8));
  CHECK(prefix_overlap(old_ctx, inter, {"C", "A"}) == doctest::Approx(7.0 / 8));  // order-blind
  CHECK(prefix_overlap(old_ctx, inter, {"C", "B", "A"}) == doctest::Approx(1.0));
  CHECK(prefix_overlap(old_ctx, inter, {"X"}) == doctest::Approx(0.0));
  CHECK(prefix_overlap({}, {}, {"A"}) == doctest::Approx(0.0));  // a canonical cache shares nothing
  CHECK(prefix_overlap(old_ctx, {0, 0, 0}, {"A"}) == doctest::Approx(0.0));
}

TEST_CASE("craft: order penalty gamma is the normalised Kendall-tau distance of the common chunks (Eq. 7)") {
  CHECK(order_penalty({"A", "B", "C"}, {"A", "B", "C"}) == doctest::Approx(0.0));
  CHECK(order_penalty({"A", "B", "C"}, {"C", "B", "A"}) == doctest::Approx(1.0));      // 3 of 3 pairs
  CHECK(order_penalty({"A", "B", "C"}, {"A", "C", "B"}) == doctest::Approx(1.0 / 3));  // (B, C)
  // Only the common chunks count: A_old = <A, C>, A_new = <C, A>: one pair, discordant.
  CHECK(order_penalty({"A", "B", "C"}, {"X", "C", "Y", "A"}) == doctest::Approx(1.0));
  CHECK(order_penalty({"A", "B", "C", "D"}, {"B", "A", "D", "C"}) == doctest::Approx(2.0 / 6));
  CHECK(order_penalty({"A"}, {"A"}) == doctest::Approx(0.0));  // m < 2
}

TEST_CASE("craft: CFO = alpha * CCI * (1 - beta * (1 - gamma)) (Eq. 8, 12)") {
  CHECK(cache_fix_overhead(1.0, 0.7, 0.5, 0.5) == doctest::Approx(0.7 * 0.75));
  CHECK(cache_fix_overhead(0.4, 0.6, 1.0, 0.0) == doctest::Approx(0.0));   // a full overlap in order
  CHECK(cache_fix_overhead(0.4, 0.6, 1.0, 1.0) == doctest::Approx(0.24));  // reversed: no credit
  CHECK(cache_fix_overhead(3.0, 0.9, 0.0, 0.0) == doctest::Approx(1.0));   // clamped
}

TEST_CASE("craft: the variant with the lowest CFO is chosen and its top contextualised tokens fixed (Eq. 12, 14)") {
  std::vector<VariantCandidate> c;
  c.push_back({key("X", {}), std::nullopt});                                     // canonical
  c.push_back({key("X", {"A", "B"}), stats_of(0.6f, {1, 3}, {5, 1, 0, 2, 3, 4})});
  c.push_back({key("X", {"C"}), stats_of(0.8f, {2}, {2, 4, 0, 1, 3, 5})});
  CraftParams p;
  p.alpha = 0.5;

  // New context [B, C]: V1 beta 3/4 -> CFO 0.5·0.6·0.25 = 0.075; V2 beta 1 -> 0; canonical 0.5·0.8.
  VariantChoice v = choose_variant(c, {"B", "C"}, 6, p);
  CHECK(v.index == 2);
  CHECK_FALSE(v.exact);
  CHECK(v.cfo == doctest::Approx(0.0));
  CHECK(v.fix_tokens == 0);

  // New context [D]: no overlap; canonical takes the highest CCI of the chunk (0.8): V1 wins.
  v = choose_variant(c, {"D"}, 6, p);
  CHECK(v.index == 1);
  CHECK(v.beta == doctest::Approx(0.0));
  CHECK(v.cfo == doctest::Approx(0.3));
  CHECK(v.fix_tokens == 2);  // ⌈0.3 · 6⌉
  CHECK(craft_fix_tokens(c, v.index, v.fix_tokens, 6) == std::vector<int32_t>{1, 5});

  // New context [B, A]: V1 overlaps fully but reversed: gamma 1, no credit: CFO 0.3; V2 0.4.
  v = choose_variant(c, {"B", "A"}, 6, p);
  CHECK(v.index == 1);
  CHECK(v.gamma == doctest::Approx(1.0));
  CHECK(v.cfo == doctest::Approx(0.3));

  // Without beta (ablation) the lowest CCI wins whatever the overlap.
  CraftParams nb = p;
  nb.use_beta = false;
  CHECK(choose_variant(c, {"B", "C"}, 6, nb).index == 1);

  // The exact chain is reused without fixing.
  v = choose_variant(c, {"A", "B"}, 6, p);
  CHECK(v.index == 1);
  CHECK(v.exact);
  CHECK(v.fix_tokens == 0);
  // The canonical cache is exact for the first chunk.
  CHECK(choose_variant(c, {}, 6, p).exact);

  // A canonical cache without stats borrows a variant's ranking; with none, the first tokens.
  CHECK(craft_fix_tokens(c, 0, 3, 6) == std::vector<int32_t>{0, 2, 4});  // the latest variant's
  CHECK(craft_fix_tokens({{key("X", {}), std::nullopt}}, 0, 2, 6) == std::vector<int32_t>{0, 1});
  // Random tokens: distinct, in range, reproducible.
  const auto r = random_fix_tokens(3, 6, 7);
  CHECK(r.size() == 3);
  CHECK(r == random_fix_tokens(3, 6, 7));
  CHECK(std::is_sorted(r.begin(), r.end()));
  CHECK(std::adjacent_find(r.begin(), r.end()) == r.end());
}

TEST_CASE("craft: Algorithm 1 splits the chunks at the gap of largest entropy growth") {
  // Sorted 10, 9.5, 1, 0.5, 0.2: gaps 0.5, 8.5, 0.5, 0.3 (Σ 9.8). Growth −p log p at gaps 2..4:
  // 0.124, 0.152, 0.107 → i* = 2: the top two chunks.
  CHECK(split_focused({1, 9.5, 0.2, 10, 0.5}) == std::vector<size_t>{1, 3});
  // One chunk far above the rest: gaps 8.75, .25, .25, .25 → equal growth at 2..4, the first: i* = 1.
  CHECK(split_focused({0.75, 10, 1, 1.25, 0.5}) == std::vector<size_t>{1});
  // A dominant gap grows the entropy least (−p log p is small for p near 1): sorted 10, 9, 8, 1,
  // 0.5 → gaps 1, 1, 7, 0.5; growth at gaps 2..4: 0.237, 0.225, 0.155 → i* = 1, not the top three.
  CHECK(split_focused({8, 0.5, 10, 1, 9}) == std::vector<size_t>{2});
  CHECK(split_focused({1, 2}) == std::vector<size_t>{0, 1});        // k < 3: every chunk
  CHECK(split_focused({3, 3, 3}) == std::vector<size_t>{0, 1, 2});  // no gap
}

TEST_CASE("craft: the focused set is decided once it holds for w layers (Algorithm 1, lines 10-13)") {
  FocusDetector f(4, 3);
  // Cumulative scores and the split (growth at gaps 2 and 3 only, k = 4):
  // layer 0: 3, 2, 1, 0 → gaps 1, 1, 1: a tie, the first → {0}
  CHECK_FALSE(f.add_layer(0, {3, 2, 1, 0}));
  // layer 1: 3, 4, 1, 0 → sorted gaps 1, 2, 1: p₂ = .5, p₃ = .25 tie (0.347) → {1}
  CHECK_FALSE(f.add_layer(1, {0, 2, 0, 0}));
  // layer 2: 3, 5, 1, 0 → gaps 2, 2, 1: p₂ = .4 (0.367) > p₃ = .2 (0.322) → {1}
  CHECK_FALSE(f.add_layer(2, {0, 1, 0, 0}));
  CHECK_FALSE(f.decided());
  // layer 3: 3, 6, 1, 0 → gaps 3, 2, 1 → {1}: the third layer in a row
  CHECK(f.add_layer(3, {0, 1, 0, 0}));
  CHECK(f.decided());
  CHECK(f.cutoff_layer() == 3);
  CHECK(f.focused() == std::vector<size_t>{1});
  CHECK_FALSE(f.add_layer(4, {9, 0, 0, 0}));  // decided: later layers change nothing
  CHECK(f.cutoff_layer() == 3);
  CHECK(f.focused() == std::vector<size_t>{1});
}

TEST_CASE("craft: variant stats from per-segment attention mass (Eq. 3, 4, 9, 10, 14)") {
  // Prefix rows [0, 2), chunk 0 rows [2, 4), chunk 1 rows [4, 7); one head; segments: prefix,
  // chunk 0, chunk 1. Chunk 1's rows on layer 0 put (on chunk 0, on chunk 1) = (0.2, 0.5),
  // (0.4, 0.3), (0.0, 0.6); on layer 1 all (0.1, 0.6).
  VariantStatsAccumulator acc({2, 4}, {4, 7}, 1);
  auto layer = [&](std::vector<std::vector<float>> rows_1) {
    std::vector<float> chunk0{0.5f, 0.5f, 0.f, 0.3f, 0.7f, 0.f};  // chunk 0's rows: prefix, self
    acc.add(2, 2, chunk0);
    std::vector<float> m;
    for (const auto& r : rows_1) m.insert(m.end(), {1 - r[0] - r[1], r[0], r[1]});
    acc.add(4, 3, m);
    acc.end_layer();
  };
  layer({{0.2f, 0.5f}, {0.4f, 0.3f}, {0.0f, 0.6f}});
  layer({{0.1f, 0.6f}, {0.1f, 0.6f}, {0.1f, 0.6f}});
  const VariantStats s = acc.stats(1);
  // inter_0 = 0.6, inter_1 = 0.3 → mean 0.45; a_l = inter_l / (3·2); intra_0 = 1.4, intra_1 = 1.8
  // → b_l = intra_l / 9.
  REQUIRE(s.inter.size() == 1);
  CHECK(s.inter[0] == doctest::Approx(0.45));
  CHECK(s.a_bar == doctest::Approx((0.6 / 6 + 0.3 / 6) / 2));
  CHECK(s.b_bar == doctest::Approx((1.4 / 9 + 1.8 / 9) / 2));
  CHECK(s.cci == doctest::Approx(cache_context_impact(0.075, 3.2 / 18)));
  // Per token Σ over layers of the mass on chunk 0: 0.3, 0.5, 0.1 → ranked 1, 0, 2.
  CHECK(s.ranked == std::vector<uint32_t>{1, 0, 2});
  // Chunk 0 has no context: a = 0, CCI 0.5.
  const VariantStats s0 = acc.stats(0);
  CHECK(s0.inter.empty());
  CHECK(s0.cci == doctest::Approx(0.5));
  CHECK(s0.b_bar == doctest::Approx((0.5 + 0.7) / 4));  // its rows' mass on itself, / |C|²
}

TEST_CASE("craft: a variant file keeps its context and stats, and a canonical one stays version 1") {
  test::TempDir dir("craft-file");
  const std::vector<uint16_t> zeros(12, 0);
  const uint16_t* k[] = {zeros.data()};
  const ChunkKvMeta canonical = key("X", {});
  write_chunk_kv(dir.path / "c.rkv", canonical, k, k);
  const std::string bytes = read_bytes(dir.path / "c.rkv");
  REQUIRE(bytes.size() > 12);
  CHECK(bytes[8] == 1);  // version 1: canonical caches are written as before

  const ChunkKvMeta variant = key("X", {"A", "B"}, 20);
  const VariantStats st = stats_of(0.62f, {0.5f, 1.5f}, {3, 0, 1, 2, 4, 5});
  write_chunk_kv(dir.path / "v.rkv", variant, k, k, &st);
  CHECK(read_bytes(dir.path / "v.rkv")[8] == 2);
  const ChunkKvReader r(dir.path / "v.rkv", variant);
  CHECK(r.meta() == variant);
  REQUIRE(r.stats());
  CHECK(*r.stats() == st);
  // Expecting another context (or the canonical one) is a header mismatch, not a hit.
  CHECK_THROWS_AS(ChunkKvReader(dir.path / "v.rkv", key("X", {"B", "A"})), CacheFileError);
  CHECK_THROWS_AS(ChunkKvReader(dir.path / "v.rkv", canonical), CacheFileError);
  CHECK_NOTHROW(ChunkKvReader(dir.path / "v.rkv", canonical, /*any_context=*/true));
  // Stats that do not match the context are refused on write.
  const VariantStats wrong = stats_of(0.6f, {1.0f});
  CHECK_THROWS(write_chunk_kv(dir.path / "w.rkv", variant, k, k, &wrong));
}

TEST_CASE("craft: the store names variants by their chunk and context, and never overwrites the canonical cache") {
  test::TempDir dir("craft-store");
  KvStoreInfo info;
  info.model_fingerprint = "m";
  info.model_name = "m.gguf";
  info.n_layer = 1;
  info.n_kv_head = 1;
  info.head_dim = 2;
  info.prefix = "canonical:0";
  const KvStore store = KvStore::open_for_write(dir.path, info);
  const std::vector<uint16_t> ones(12, 0x3c00), twos(12, 0x4000);
  const uint16_t* k1[] = {ones.data()};
  const uint16_t* k2[] = {twos.data()};
  const ChunkKvMeta canonical = key("X", {});
  store.put(canonical, k1, k1);
  const std::string before = read_bytes(store.chunk_path(canonical));
  CHECK(store.variants(canonical).empty());

  const VariantStats st = stats_of(0.7f, {1.0f});
  store.put(key("X", {"A"}, 30), k2, k2, &st);
  const VariantStats st2 = stats_of(0.6f, {1.0f, 2.0f});
  store.put(key("X", {"A", "B"}, 40), k2, k2, &st2);
  CHECK(read_bytes(store.chunk_path(canonical)) == before);  // the canonical file is untouched
  CHECK(store.chunk_path(key("X", {"A"})) != store.chunk_path(canonical));
  CHECK(store.chunk_path(key("X", {"A", "B"})) != store.chunk_path(key("X", {"B", "A"})));
  const auto found = store.variants(canonical);
  REQUIRE(found.size() == 2);
  for (const ChunkKvReader& r : found) CHECK_FALSE(r.meta().context.empty());

  // A fresh handle lists them from the directory; a corrupt variant is skipped and counted.
  const KvStore again = KvStore::open_for_read(dir.path, "m");
  {
    std::fstream f(again.chunk_path(key("X", {"A"})), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  int bad = 0;
  const auto listed = again.variants(canonical, &bad);
  CHECK(listed.size() == 1);
  CHECK(bad == 1);
  CHECK(listed[0].meta().context == Ids{"A", "B"});
}

TEST_CASE("craft: the plan reuses an exact chain as is, fixes the chosen tokens, and never takes another context as exact") {
  // [prefix 4][c1 6][c2 6][c3 6][question 2]
  RagPrompt p;
  auto add = [&](PromptSegment::Kind kind, std::string id, int n) {
    PromptSegment s{kind, std::move(id), std::vector<int32_t>(size_t(n), 7), p.n_tokens()};
    p.ids.insert(p.ids.end(), s.ids.begin(), s.ids.end());
    p.segments.push_back(std::move(s));
  };
  add(PromptSegment::Kind::prefix, "", 4);
  add(PromptSegment::Kind::chunk, "c1", 6);
  add(PromptSegment::Kind::chunk, "c2", 6);
  add(PromptSegment::Kind::chunk, "c3", 6);
  add(PromptSegment::Kind::suffix, "", 2);

  test::TempDir dir("craft-plan");
  std::map<std::string, std::vector<VariantCandidate>> cands;
  std::map<std::string, std::shared_ptr<const SegmentKv>> files;  // by store-like name
  const std::vector<uint16_t> zeros(12, 0);
  const uint16_t* k[] = {zeros.data()};
  auto put = [&](ChunkKvMeta m, std::optional<VariantStats> st) {
    std::string name = m.chunk_id;
    for (const auto& c : m.context) name += "." + c;
    write_chunk_kv(dir.path / (name + ".rkv"), m, k, k, st ? &*st : nullptr);
    files[name] = std::make_shared<DiskSegmentKv>(ChunkKvReader(dir.path / (name + ".rkv"), m));
    cands[m.chunk_id].push_back({m, st});
  };
  ChunkKvMeta pre = key("@prefix", {}, 0, 4);
  write_chunk_kv(dir.path / "prefix.rkv", pre, k, k);
  const auto prefix_kv = std::make_shared<DiskSegmentKv>(ChunkKvReader(dir.path / "prefix.rkv", pre));
  put(key("c1", {}), std::nullopt);
  put(key("c2", {"c1"}, 10), stats_of(0.6f, {1.0f}, {4, 2, 0, 1, 3, 5}));  // the exact chain
  // c3: a variant after [cX, cY] — the same 12 tokens before it, so the same first position
  // (16) as in this prompt — but another context: never exact.
  put(key("c3", {"cX", "cY"}, 16), stats_of(0.6f, {1.0f, 1.0f}, {5, 4, 3, 2, 1, 0}));

  VariantSource src;
  src.candidates = [&](const PromptSegment& s) { return cands[s.chunk_id]; };
  src.open = [&](const ChunkKvMeta& m) {
    std::string name = m.chunk_id;
    for (const auto& c : m.context) name += "." + c;
    return files.at(name);
  };
  SegmentLookup prefix_lookup = [&](const PromptSegment&) -> std::shared_ptr<const SegmentKv> { return prefix_kv; };
  CraftParams cp;
  cp.alpha = 0.5;
  const PrefillPlan plan = plan_prefill(p, ReuseMode::craft, BlendParams{}, 4, prefix_lookup, &src, cp);
  REQUIRE(plan.segments.size() == 5);
  CHECK(plan.segments[1].exact());
  CHECK(plan.segments[2].exact());  // after exactly [c1]
  REQUIRE(plan.segments[3].kv);
  CHECK(plan.segments[3].kv->meta().first_pos == plan.segments[3].begin);
  CHECK_FALSE(plan.segments[3].exact());  // same position, other chain
  CHECK(plan.counts.exact_hits == 3);     // prefix, c1, c2
  // c3: CFO = 0.5 · 0.6 = 0.3 → ⌈1.8⌉ = 2 tokens, its top-ranked 5 and 4 → rows 21, 20.
  REQUIRE(plan.segments[3].choice);
  CHECK(plan.segments[3].choice->cfo == doctest::Approx(0.3));
  CHECK(plan.segments[3].fix == std::vector<int32_t>{4, 5});
  CHECK(plan.active == std::vector<int32_t>{20, 21, 22, 23});
  CHECK(plan.n_forced == 2);
  CHECK(plan.checks.empty());
  CHECK_FALSE(plan.pre_select);

  // craft/prophet: the same variants and budget (2 tokens), chosen among c3's 6 by the question.
  cp.question_tokens = true;
  const PrefillPlan qp = plan_prefill(p, ReuseMode::craft, BlendParams{}, 4, prefix_lookup, &src, cp);
  CHECK(qp.pre_select);
  CHECK(qp.pre_keep == 2);
  CHECK(qp.n_candidates == 6);
  CHECK(qp.active == std::vector<int32_t>{16, 17, 18, 19, 20, 21, 22, 23});

  // auto with prophet (the default selection): the same rule as craft/prophet for a chunk with
  // variant metadata — its 2 budget tokens among its 6 rows, chosen by the question.
  BlendParams bp;
  bp.selection = Selection::prophet;
  cp.question_tokens = false;
  const PrefillPlan ap = plan_prefill(p, ReuseMode::auto_, bp, 4, prefix_lookup, &src, cp);
  CHECK(ap.pre_select);
  CHECK(ap.pre_keep == 2);
  CHECK(ap.n_candidates == 6);
  CHECK(ap.n_forced == 0);
  CHECK(ap.active == std::vector<int32_t>{16, 17, 18, 19, 20, 21, 22, 23});
  // auto with another selection: craft's CCI-ranked fix tokens as they are.
  bp.selection = Selection::kv;
  const PrefillPlan av = plan_prefill(p, ReuseMode::auto_, bp, 4, prefix_lookup, &src, cp);
  CHECK(av.n_forced == 2);
  CHECK(av.n_candidates == 0);
  CHECK(av.active == std::vector<int32_t>{20, 21, 22, 23});
}

TEST_CASE("craft: mode specs name the ablations and alpha") {
  CHECK(parse_mode_spec("craft").mode == ReuseMode::craft);
  const ModeSpec s = parse_mode_spec("craft/no-focus@0.4");
  CHECK(s.name() == "craft/no-focus@0.4");
  CraftParams d;
  const CraftParams c = s.craft(d);
  CHECK(c.alpha == doctest::Approx(0.4));
  CHECK(c.focus_window == 0);
  CHECK(parse_mode_spec("craft/no-beta").craft(d).use_beta == false);
  CHECK(parse_mode_spec("craft/random@2.5").craft(d).random_tokens);
  CHECK(parse_mode_spec("craft/prophet").craft(d).question_tokens);
  CHECK(parse_mode_spec("craft@2.5").blend(BlendParams{}).recompute_ratio == doctest::Approx(BlendParams{}.recompute_ratio));
  CHECK_THROWS(parse_mode_spec("craft/kv"));
  CHECK_THROWS(parse_mode_spec("craft@11"));
  CHECK_THROWS(parse_mode_spec("craft~0.5"));
  CHECK_THROWS(parse_mode_spec("blend/no-beta"));
}

TEST_CASE("craft: variants are evicted lowest f_r first and the budget is never exceeded (Cache-Craft §3.3)") {
  std::vector<VariantFile> files{{"a", 10, 2.0, 5}, {"b", 10, 0.5, 9}, {"c", 10, 0.5, 3}, {"d", 10, 7.0, 1}};
  const auto order = eviction_order(files);
  CHECK(order[0].name == "c");  // f_r 0.5, older
  CHECK(order[1].name == "b");
  CHECK(order[2].name == "a");
  CHECK(order[3].name == "d");

  test::TempDir dir("craft-ledger");
  KvStoreInfo info;
  info.model_fingerprint = "m";
  info.model_name = "m.gguf";
  info.n_layer = 1;
  info.n_kv_head = 1;
  info.head_dim = 2;
  info.prefix = "canonical:0";
  const KvStore store = KvStore::open_for_write(dir.path, info);
  CraftStoreSettings cs;
  cs.budget.max_variants = 2;
  write_craft_settings(store, cs);
  CHECK(read_craft_settings(store).budget.max_variants == 2);

  const std::vector<uint16_t> zeros(12, 0);
  const uint16_t* k[] = {zeros.data()};
  store.put(key("X", {}), k, k);  // a canonical cache: outside the budget
  VariantLedger ledger(store);
  auto put = [&](const std::string& ctx) {
    const ChunkKvMeta m = key("X", {ctx});
    const VariantStats st = stats_of(0.6f, {1.0f});
    std::vector<std::string> evicted;
    const bool ok = ledger.admit(100, [&] { store.put(m, k, k, &st); }, &evicted);
    CHECK(ok);
    return evicted;
  };
  auto name = [&](const std::string& ctx) { return store.chunk_path(key("X", {ctx})).filename().string(); };
  CHECK(put("A").empty());
  CHECK(put("B").empty());
  ledger.record_use(name("A"), 0.5);   // f_r(A) = 2
  ledger.record_use(name("B"), 0.25);  // f_r(B) = 4
  ledger.flush();
  const std::vector<std::string> ev = put("C");  // over the count: the lowest f_r (A) goes
  REQUIRE(ev.size() == 1);
  CHECK(ev[0] == name("A"));
  const auto left = ledger.files();
  CHECK(left.size() == 2);
  for (const VariantFile& f : left) CHECK(f.name != name("A"));
  CHECK(std::filesystem::exists(store.chunk_path(key("X", {}))));  // the canonical cache stays

  // A byte budget smaller than one variant admits nothing and writes nothing.
  cs.budget = {};
  cs.budget.max_bytes = 50;
  write_craft_settings(store, cs);
  bool wrote = false;
  CHECK_FALSE(ledger.admit(100, [&] { wrote = true; }));
  CHECK_FALSE(wrote);
}

TEST_CASE("craft: alpha is the smallest that passes the gate (Eq. 13)") {
  nlohmann::json summary = {{"modes",
                             {{"craft@0.2", {{"compute_fraction", 0.1}, {"craft", {{"mean_cfo", 0.1}}}}},
                              {"craft@0.5", {{"compute_fraction", 0.2}, {"craft", {{"mean_cfo", 0.25}}}}},
                              {"craft@1", {{"compute_fraction", 0.4}, {"craft", {{"mean_cfo", 0.5}}}}}}}};
  auto check = [](const std::string& mode, bool pass) {
    GateCheck g;
    g.mode = mode;
    g.threshold = "min-agreement";
    g.pass = pass;
    return g;
  };
  std::vector<GateCheck> checks{check("craft@0.2", false), check("craft@0.5", true), check("craft@1", true)};
  GateCheck kl = check("craft@0.5", false);
  kl.threshold = "max-kl";
  const std::vector<AlphaCandidate> cands{{"craft@1", 1.0}, {"craft@0.2", 0.2}, {"craft@0.5", 0.5}};
  AlphaFit fit = fit_alpha(summary, checks, cands);
  REQUIRE(fit.alpha);
  CHECK(*fit.alpha == doctest::Approx(0.5));
  CHECK(fit.table.size() == 3);
  CHECK(fit.table[0]["alpha"] == 0.2);  // sorted by alpha
  CHECK(fit.table[1]["mean_cfo"] == 0.25);
  checks.push_back(kl);  // every threshold of the mode must pass
  fit = fit_alpha(summary, checks, cands);
  CHECK(*fit.alpha == doctest::Approx(1.0));
  fit = fit_alpha(summary, {check("craft@0.2", false), check("craft@0.5", false), check("craft@1", false)}, cands);
  CHECK_FALSE(fit.alpha);
  fit = fit_alpha(summary, {}, cands);  // the gate off: the smallest alpha
  CHECK(*fit.alpha == doctest::Approx(0.2));
}

TEST_CASE("craft: two writers admitting variants into one store never exceed its budget nor lose the usage file") {
  test::TempDir dir("craft-concurrent");
  KvStoreInfo info;
  info.model_fingerprint = "m";
  info.model_name = "m.gguf";
  info.n_layer = 1;
  info.n_kv_head = 1;
  info.head_dim = 2;
  info.prefix = "canonical:0";
  const KvStore store = KvStore::open_for_write(dir.path, info);
  CraftStoreSettings cs;
  cs.budget.max_variants = 3;
  write_craft_settings(store, cs);
  const std::vector<uint16_t> zeros(12, 0);
  const uint16_t* k[] = {zeros.data()};
  std::atomic<bool> stop{false};
  std::atomic<size_t> peak{0};
  std::thread watcher([&] {
    while (!stop) {
      size_t n = 0;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir.path / "kv", ec))
        n += e.path().filename().string().size() == 37;  // <chunk>.<context>.rkv
      peak = std::max(peak.load(), n);
    }
  });
  auto writer = [&](const std::string& who) {
    const KvStore own = KvStore::open_for_read(dir.path, "m");  // as another process would
    VariantLedger ledger(own);
    for (int i = 0; i < 12; ++i) {
      const ChunkKvMeta m = key("X", {who + std::to_string(i)});
      const VariantStats st = stats_of(0.6f, {1.0f});
      CHECK(ledger.admit(100, [&] { own.put(m, k, k, &st); }));
      ledger.record_use(own.chunk_path(m).filename().string(), 0.5);
      ledger.flush();
    }
  };
  std::thread a(writer, "a"), b(writer, "b");
  a.join();
  b.join();
  stop = true;
  watcher.join();
  CHECK(peak.load() <= 3);
  VariantLedger ledger(store);
  const auto files = ledger.files();
  CHECK(files.size() == 3);
  for (const VariantFile& f : files) CHECK(f.frequency_reuse == doctest::Approx(2.0));  // one use at CFO 0.5
}
