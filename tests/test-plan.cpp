// The plan step (core/rag/plan.h) on a hand-made prompt, without a model: which segments are cached
// and exact, which rows each mode computes, the gradual-filtering schedule, the HKVD selection,
// per-tier counts, and what dropping a cache that failed to load changes.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/kv/chunk-kv-file.h"
#include "core/kv/segment-kv.h"
#include "core/rag/mode-spec.h"
#include "core/rag/plan.h"
#include "tests/test-tempdir.h"

namespace {

using namespace ragkv;

// [prefix 4][c1 5][c2 6][c3 3][question 2]: 20 tokens.
RagPrompt small_prompt() {
  RagPrompt p;
  auto add = [&](PromptSegment::Kind kind, std::string id, int n) {
    PromptSegment s{kind, std::move(id), std::vector<int32_t>(size_t(n), 7), p.n_tokens()};
    p.ids.insert(p.ids.end(), s.ids.begin(), s.ids.end());
    p.segments.push_back(std::move(s));
  };
  add(PromptSegment::Kind::prefix, "", 4);
  add(PromptSegment::Kind::chunk, "c1", 5);
  add(PromptSegment::Kind::chunk, "c2", 6);
  add(PromptSegment::Kind::chunk, "c3", 3);
  add(PromptSegment::Kind::suffix, "", 2);
  return p;
}

// Chunk caches of the prompt's segments, computed in the canonical context: the prefix at 0,
// every chunk right after it (first_pos 4). One 1-layer file each, in a directory of its own.
struct Caches {
  test::TempDir dir{"plan"};
  std::map<std::string, std::shared_ptr<const SegmentKv>> by_id;  // "" is the prefix
  std::map<std::string, std::string> bad;                         // id -> why its file fails
  explicit Caches(const RagPrompt& p) {
    for (const PromptSegment& s : p.segments) {
      if (s.kind == PromptSegment::Kind::suffix) continue;
      ChunkKvMeta m;
      m.model_fingerprint = "m";
      m.chunk_id = s.kind == PromptSegment::Kind::prefix ? "@prefix" : s.chunk_id;
      m.prefix = "canonical:0";
      m.n_layer = 1;
      m.n_kv_head = 1;
      m.head_dim = 2;
      m.n_tokens = uint32_t(s.ids.size());
      m.token_hash = token_ids_hash(s.ids);
      m.first_pos = s.kind == PromptSegment::Kind::prefix ? 0 : 4;
      const std::vector<uint16_t> zeros(size_t(m.n_tokens) * m.kv_dim(), 0);
      const uint16_t* k[] = {zeros.data()};
      const auto path = dir.path / (m.chunk_id + ".rkv");
      write_chunk_kv(path, m, k, k);
      by_id[s.chunk_id] = std::make_shared<DiskSegmentKv>(ChunkKvReader(path, m));
    }
  }
  SegmentLookup lookup() const {
    return [this](const PromptSegment& s) -> std::shared_ptr<const SegmentKv> {
      if (const auto b = bad.find(s.chunk_id); b != bad.end()) throw CacheFileError(b->second);
      const auto it = by_id.find(s.chunk_id);
      return it == by_id.end() ? nullptr : it->second;
    };
  }
};

std::vector<int32_t> range(int32_t first, int32_t last) {
  std::vector<int32_t> r;
  for (int32_t i = first; i < last; ++i) r.push_back(i);
  return r;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("plan: blend recomputes the repositioned chunks' rows and the question, on a gradual schedule") {
  const RagPrompt p = small_prompt();
  const Caches caches(p);
  BlendParams blend;  // r = 0.15, three check layers
  const PrefillPlan plan = plan_prefill(p, ReuseMode::blend, blend, 8, caches.lookup());
  REQUIRE(plan.segments.size() == 5);
  CHECK(plan.segments[0].exact());  // the prefix at 0
  CHECK(plan.segments[1].exact());  // chunk 1 right after it: an exact prefix hit
  CHECK_FALSE(plan.segments[2].exact());
  CHECK_FALSE(plan.segments[3].exact());
  CHECK_FALSE(plan.segments[4].kv);  // the question is never cached
  CHECK(plan.counts.disk_hits == 4);
  CHECK(plan.counts.hits() == 4);
  CHECK(plan.counts.exact_hits == 2);
  CHECK(plan.counts.misses == 0);
  CHECK(plan.reused_tokens() == 18);
  // Candidates: chunks 2 and 3 (rows 9..17); active: them and the question (rows 18, 19).
  CHECK(plan.n_candidates == 9);
  CHECK(plan.active == range(9, 20));
  for (int32_t i = 0; i < 20; ++i) CHECK(plan.candidate[size_t(i)] == (i >= 9 && i < 18));
  // 1.67r, 1.33r, r of 9 candidates on layers 1, 2, 3.
  REQUIRE(plan.checks.size() == 3);
  CHECK(plan.checks[0].layer == 1);
  CHECK(plan.checks[0].keep == 2);  // round(0.25 · 9)
  CHECK(plan.checks[1].keep == 2);  // round(0.20 · 9)
  CHECK(plan.checks[2].layer == 3);
  CHECK(plan.checks[2].keep == 1);  // round(0.15 · 9)
}

TEST_CASE("plan: reuse computes the question only, and full looks nothing up") {
  const RagPrompt p = small_prompt();
  const Caches caches(p);
  const PrefillPlan reuse = plan_prefill(p, ReuseMode::reuse, BlendParams{}, 8, caches.lookup());
  CHECK(reuse.active == range(18, 20));
  CHECK(reuse.checks.empty());
  CHECK(reuse.n_candidates == 9);
  CHECK(reuse.sparse());

  int calls = 0;
  const SegmentLookup counting = [&](const PromptSegment&) -> std::shared_ptr<const SegmentKv> {
    ++calls;
    return nullptr;
  };
  const PrefillPlan full = plan_prefill(p, ReuseMode::full, BlendParams{}, 8, counting);
  CHECK(calls == 0);
  CHECK_FALSE(full.sparse());
  CHECK(full.reused_tokens() == 0);
  CHECK(full.loaded_groups == 0);
  // The dense groups are one forward call per segment: precompute's calls for the prefix and
  // chunk 1, the answerer's for knowledge-tree nodes.
  CHECK(full.dense_groups == std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}});
  // No lookup at all (no store): every mode computes everything.
  const PrefillPlan none = plan_prefill(p, ReuseMode::blend, BlendParams{}, 8, SegmentLookup{});
  CHECK(none.active == range(0, 20));
  CHECK(none.n_candidates == 0);
}

TEST_CASE("plan: prefix loads the leading exact groups only, and looks up no further") {
  const RagPrompt p = small_prompt();
  Caches caches(p);
  std::vector<std::string> asked;
  const SegmentLookup lookup = [&](const PromptSegment& s) {
    asked.push_back(s.chunk_id);
    return caches.lookup()(s);
  };
  const PrefillPlan plan = plan_prefill(p, ReuseMode::prefix, BlendParams{}, 8, lookup);
  CHECK(asked == std::vector<std::string>{"", "c1"});
  CHECK(plan.loaded_groups == 2);
  CHECK(plan.reused_tokens() == 9);

  caches.by_id.erase("c1");  // chunk 1 missing: only the prefix is loaded
  const PrefillPlan part = plan_prefill(p, ReuseMode::prefix, BlendParams{}, 8, caches.lookup());
  CHECK(part.loaded_groups == 1);
  CHECK(part.counts.misses == 1);
}

TEST_CASE("plan: missing and bad caches are computed, and so is a cache dropped after a failed load") {
  const RagPrompt p = small_prompt();
  Caches caches(p);
  caches.by_id.erase("c2");
  caches.bad["c3"] = "c3.rkv: truncated";
  PrefillPlan plan = plan_prefill(p, ReuseMode::blend, BlendParams{}, 8, caches.lookup());
  CHECK(plan.counts.misses == 1);
  CHECK(plan.counts.bad == 1);
  CHECK(plan.counts.hits() == 2);
  CHECK(plan.n_candidates == 0);  // nothing is repositioned: chunk 1 is exact, 2 and 3 computed
  CHECK(plan.active == range(9, 20));
  CHECK(plan.checks.size() == 3);

  // Chunk 1's file fails while loading: it is computed from then on, and counted as bad.
  Caches fresh(p);
  PrefillPlan p2 = plan_prefill(p, ReuseMode::blend, BlendParams{}, 8, fresh.lookup());
  p2.drop_cache(1);
  CHECK_FALSE(p2.segments[1].kv);
  CHECK(p2.counts.bad == 1);
  CHECK(p2.counts.disk_hits == 3);
  CHECK(p2.counts.exact_hits == 1);
  CHECK(p2.active == concat(range(4, 9), range(9, 20)));
  CHECK(p2.n_candidates == 9);
}

TEST_CASE("plan: HKVD selection keeps every non-candidate row and the most deviating candidates") {
  // Active rows 3..8; rows 4, 5, 7 are candidates.
  const std::vector<int32_t> active = range(3, 9);
  std::vector<uint8_t> candidate(10, 0);
  candidate[4] = candidate[5] = candidate[7] = 1;
  const std::vector<float> deviation = {9.f, 1.f, 5.f, 100.f, 3.f, 0.f};  // per active row
  // Candidates (indices into active): 1 (dev 1), 2 (dev 5), 4 (dev 3). Keep 2: indices 2 and 4.
  CHECK(select_hkvd_rows(active, candidate, deviation, 2) == std::vector<int32_t>{0, 2, 3, 4, 5});
  CHECK(select_hkvd_rows(active, candidate, deviation, 0) == std::vector<int32_t>{0, 3, 5});
  CHECK(select_hkvd_rows(active, candidate, deviation, 10) == range(0, 6));
}

TEST_CASE("plan: gradual filtering keeps a little more than r on early check layers, r on the last") {
  const auto f = gradual_filter_fractions(0.15, 3);
  REQUIRE(f.size() == 3);
  CHECK(f[0] == doctest::Approx(0.25));
  CHECK(f[1] == doctest::Approx(0.20));
  CHECK(f[2] == doctest::Approx(0.15));
  CHECK(gradual_filter_fractions(0.15, 1) == std::vector<double>{0.15});
  CHECK(gradual_filter_fractions(0.8, 2)[0] == 1.0);  // capped
  CHECK(top_k_indices({0.5f, 3.f, 1.f, 3.f, -1.f}, 3) == std::vector<int32_t>{1, 2, 3});
  CHECK(top_k_indices({1.f, 2.f}, 5) == std::vector<int32_t>{0, 1});
}

TEST_CASE("plan: the check layers stop one short of the last layer on shallow models") {
  const RagPrompt p = small_prompt();
  const Caches caches(p);
  BlendParams blend;
  blend.check_layers = 5;
  const PrefillPlan plan = plan_prefill(p, ReuseMode::blend, blend, 3, caches.lookup());
  REQUIRE(plan.checks.size() == 2);  // layers 1 and 2 of 0..2
  CHECK(plan.checks.back().layer == 2);
}

TEST_CASE("plan: mode variants parse as MODE/METHOD@R~P+freq and print back the same") {
  const ModeSpec s = parse_mode_spec("blend/prophet@0.2~0.8");
  CHECK(s.mode == ReuseMode::blend);
  CHECK(s.selection == Selection::prophet);
  CHECK(s.ratio == 0.2);
  CHECK(s.adaptive == 0.8);
  CHECK(s.name() == "blend/prophet@0.2~0.8");
  for (const char* name : {"full", "prefix", "reuse", "blend", "blend/v", "blend@0.15", "blend/sink+v@0.1", "blend~0.5",
                           "full+freq", "blend/sink+v@0.1+freq", "craft/prophet@0.05+freq"})
    CHECK(parse_mode_spec(name).name() == name);
  CHECK(parse_mode_spec("prefix+freq").freq_order);
  CHECK(parse_mode_spec("prefix+freq").mode == ReuseMode::prefix);
  CHECK_FALSE(parse_mode_spec("blend/sink+v").freq_order);
  BlendParams d;
  d.recompute_ratio = 0.15;
  d.selection = Selection::kv;
  const BlendParams b = parse_mode_spec("blend/v@0.3").blend(d);
  CHECK(b.selection == Selection::v);
  CHECK(b.recompute_ratio == 0.3);
  CHECK(b.adaptive_mass == 0.0);
  CHECK(parse_mode_spec("blend").blend(d).selection == Selection::kv);
  auto err = [](const char* s) {
    try {
      parse_mode_spec(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err("blend/nope").find("unknown selection method 'nope' (expected kv, v, head-v") != std::string::npos);
  CHECK(err("reuse/v").find("applies to blend only") != std::string::npos);
  CHECK(err("blend@1.5").find("must be a number in [0, 1], got '1.5'") != std::string::npos);
  CHECK(err("blend@0.2/v").find("in that order") != std::string::npos);
  CHECK(err("bogus").find("unknown mode 'bogus'") != std::string::npos);
  CHECK(err("full+fraq").find("unknown mode 'full+fraq'") != std::string::npos);
  CHECK(err("blend+freq@0.2").find("'+freq' comes last") != std::string::npos);
}

TEST_CASE("plan: adaptive keep covers the score mass, within half and twice the fixed count") {
  const std::vector<int32_t> active = range(0, 10);
  std::vector<uint8_t> cand(10, 1);
  cand[9] = 0;  // the question
  // Candidate scores 8, 4, 2, 1, 1, 0, 0, 0, 0: total 16.
  const std::vector<float> score = {8, 4, 2, 1, 1, 0, 0, 0, 0, 99};
  CHECK(adaptive_keep(active, cand, score, 3, 0.0) == 3);   // off
  CHECK(adaptive_keep(active, cand, score, 3, 0.5) == 1);   // 8 ≥ 8 — but at least 3 / 2 = 1
  CHECK(adaptive_keep(active, cand, score, 3, 0.75) == 2);  // 8 + 4 = 12
  CHECK(adaptive_keep(active, cand, score, 3, 0.99) == 5);  // all of the mass: 5 rows, under 2 · 3
  CHECK(adaptive_keep(active, cand, score, 2, 0.99) == 4);  // capped at 2 · 2
  CHECK(adaptive_keep(active, cand, score, 4, 0.5) == 2);   // raised to 4 / 2
}
