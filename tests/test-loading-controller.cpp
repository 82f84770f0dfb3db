// The loading controller (core/rag/loading-controller.h): its decisions on hand-computed cases (a slow
// tier is recomputed, a fast one loaded, a load hidden under compute kept, Cache-Craft Eq. 16's
// preload depth, CacheBlend §5.1's hidden ratio at its boundary), the machine profile's file
// (round trip, corrupt file named, another model's remeasured), and end to end on the default
// model: segments the controller recomputes give full's answer (bit for bit under prefix).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/eval/metrics.h"
#include "core/kv/kv-store.h"
#include "core/kv/kv-tiers.h"
#include "core/kv/tier-read-rates.h"
#include "core/rag/answer.h"
#include "core/rag/cache-keys.h"
#include "core/rag/cost-profile.h"
#include "core/rag/loading-controller.h"
#include "core/rag/precompute.h"
#include "tests/test-rag-mini.h"
#include "tests/test-tempdir.h"
#include "core/util/error.h"

namespace {

namespace fs = std::filesystem;
using namespace ragkv;

// T(α, β) = β ms: one millisecond per token whatever the context (linear, so exact everywhere).
PrefillCostModel one_ms_per_token() {
  PrefillCostModel c;
  c.set_grid({0, 1000}, {100, 200}, {{100, 200}, {100, 200}});
  return c;
}

// Rates given in bytes per ms (1 MB/s = 1e3 bytes per ms).
TierReadRates rates(double device, double host, double disk_cached, double disk_cold) {
  TierReadRates r;
  r.device_mb_s = device / 1e3;
  r.host_mb_s = host / 1e3;
  r.disk_cached_mb_s = disk_cached / 1e3;
  r.disk_cold_mb_s = disk_cold / 1e3;
  r.kv_dtype = "f16";
  return r;
}

LoadCandidate candidate(KvTier tier, uint64_t bytes, int64_t tokens, double resident = 1.0) {
  LoadCandidate c;
  c.tier = tier;
  c.bytes = bytes;
  c.tokens = tokens;
  c.resident = resident;
  return c;
}

}  // namespace

TEST_CASE("loading controller: a slow tier is recomputed, a fast one loaded") {
  const LoadingController ctl(rates(1e6, 1e5, 1e4, 100), one_ms_per_token(), 10);
  CHECK(ctl.compute_ms(0, 100) == doctest::Approx(100));
  CHECK(ctl.compute_ms(700, 150) == doctest::Approx(150));
  // Cold disk: 1e5 bytes at 100 B/ms plus the upload at 1e5 B/ms = 1001 ms, against 100 ms of compute.
  const LoadCandidate cold = candidate(KvTier::disk, 100000, 100, 0.0);
  CHECK(ctl.load_ms(cold) == doctest::Approx(1001));
  const LoadControl a = ctl.decide({cold}, 0, 0.0, true);
  REQUIRE(a.segments.size() == 1);
  CHECK(a.segments[0].recompute);
  CHECK(a.prefill_ms == doctest::Approx(100));  // nothing loaded: the compute alone
  // Page-cached disk: 1e5 / 1e4 + 1 = 11 ms, and host memory 1 ms: both loaded.
  const LoadCandidate cached = candidate(KvTier::disk, 100000, 100, 1.0);
  CHECK(ctl.load_ms(cached) == doctest::Approx(11));
  CHECK_FALSE(ctl.decide({cached}, 0, 0.0, true).segments[0].recompute);
  const LoadControl h = ctl.decide({candidate(KvTier::host, 100000, 100)}, 0, 0.0, true);
  CHECK_FALSE(h.segments[0].recompute);
  CHECK(h.prefill_ms == doctest::Approx(1 + 1.0 / 10));  // max(A, C) + A / L
  // Half resident: half the bytes at each disk rate.
  CHECK(ctl.load_ms(candidate(KvTier::disk, 100000, 100, 0.5)) == doctest::Approx(500 + 5 + 1));
}

TEST_CASE("loading controller: a load hidden under compute is kept, and the pipeline is balanced") {
  const LoadingController ctl(rates(1e6, 1e5, 1e4, 100), one_ms_per_token(), 10);
  // 150 ms to compute the chunk beats 1001 ms to read it alone — but 5000 ms of other compute hide
  // the read: loading costs max(1001, 5000) + 100.1, recomputing 5150.
  const LoadControl hidden = ctl.decide({candidate(KvTier::disk, 100000, 150, 0.0)}, 5000, 0.0, true);
  CHECK_FALSE(hidden.segments[0].recompute);
  CHECK(hidden.prefill_ms == doctest::Approx(5100.1));
  // Two chunks of 100 ms to read (1e6 bytes at 1e4 B/ms, upload 0 here) and 120 ms to compute:
  // load both 200 + 20, recompute both 240, one of each max(100, 120) + 10 = 130.
  const LoadingController fast_upload(rates(1e12, 1e12, 1e4, 1e4), one_ms_per_token(), 10);
  const LoadControl two = fast_upload.decide(
      {candidate(KvTier::disk, 1000000, 120), candidate(KvTier::disk, 1000000, 120)}, 0, 0.0, true);
  CHECK(two.recomputed() == 1);
  CHECK(two.prefill_ms == doctest::Approx(130));
  CHECK(two.load_ms == doctest::Approx(100));
  CHECK(two.compute_ms == doctest::Approx(120));
  // Dense (prefix): a leading run is loaded, then everything computed: [10 ms / 100 ms] loaded,
  // [1000 ms / 100 ms] computed (10 + 100 beats 1010 and 200).
  const LoadingController dev(rates(100, 1e12, 1e4, 1e4), one_ms_per_token(), 10);
  const LoadControl dense =
      dev.decide({candidate(KvTier::device, 1000, 100), candidate(KvTier::device, 100000, 100)}, 0, 0.0, false);
  CHECK_FALSE(dense.segments[0].recompute);
  CHECK(dense.segments[1].recompute);
  CHECK(dense.prefill_ms == doctest::Approx(110));
  CHECK_FALSE(dense.hidden_ratio.has_value());  // nothing overlaps in a dense prefill
}

TEST_CASE("loading controller: the preload depth is Cache-Craft's Eq. 16") {
  // Cache-Craft Fig. 19: L = 5, T_prefill : T_load = 1 : 2 gives L_p = (5 − 1)(1 − 1/2) + 1 = 3.
  const LoadingController ctl(rates(100, 1e12, 1e4, 1e4), one_ms_per_token(), 5);
  const LoadCandidate big = candidate(KvTier::device, 100000, 10000);  // 1000 ms to load, 10 s to compute
  const LoadControl a = ctl.decide({big}, 500, 0.0, true);
  CHECK_FALSE(a.segments[0].recompute);
  CHECK(a.load_ms == doctest::Approx(1000));
  CHECK(a.compute_ms == doctest::Approx(500));
  CHECK(a.preload_depth == 3);
  // 1 : 4 gives (4)(3/4) + 1 = 4; compute as long as loading or longer gives 1; no load gives 1.
  CHECK(ctl.decide({big}, 250, 0.0, true).preload_depth == 4);
  CHECK(ctl.decide({big}, 1000, 0.0, true).preload_depth == 1);
  CHECK(ctl.decide({big}, 3000, 0.0, true).preload_depth == 1);
  CHECK(ctl.decide({}, 3000, 0.0, true).preload_depth == 1);
  // Nearly nothing computed: every layer but the first is read ahead, (5 − 1)(1 − 0.001) + 1 → 5.
  CHECK(ctl.decide({big}, 1, 0.0, true).preload_depth == 5);
}

TEST_CASE("loading controller: the hidden ratio is the r whose recompute equals loading") {
  // CacheBlend §5: loading a layer takes 16 ms, recomputing 15 % of it 3 ms, so r up to 0.8 hides:
  // 200 tokens (200 ms over 10 layers, 20 per layer) read in 160 ms (16 per layer).
  const LoadingController ctl(rates(100, 1e12, 1e4, 1e4), one_ms_per_token(), 10);
  LoadCandidate c = candidate(KvTier::device, 16000, 200);
  c.scales_with_ratio = true;
  const LoadControl a = ctl.decide({c}, 0, 0.15, true);
  CHECK_FALSE(a.segments[0].recompute);
  REQUIRE(a.hidden_ratio.has_value());
  CHECK(*a.hidden_ratio == doctest::Approx(0.8));
  CHECK(a.recompute_ratio == doctest::Approx(0.15));  // reported, not applied
  CHECK(a.compute_ms == doctest::Approx(30));
  // Raised to the boundary the recompute takes as long as the loading: the prefill is no longer.
  const LoadControl raised = ctl.decide({c}, 0, 0.15, true, true);
  CHECK(raised.recompute_ratio == doctest::Approx(0.8));
  CHECK(raised.compute_ms == doctest::Approx(raised.load_ms));
  CHECK(raised.prefill_ms == doctest::Approx(a.prefill_ms));
  // Never lowered below the user's r.
  CHECK(ctl.decide({c}, 0, 0.9, true, true).recompute_ratio == doctest::Approx(0.9));
  // Check layers (2 of 10 compute every candidate) and 20 ms of question come first:
  // r = (160 − 20 − 200·0.2) / (200·0.8) = 0.625.
  c.fixed = 0.2;
  CHECK(*ctl.decide({c}, 20, 0.15, true).hidden_ratio == doctest::Approx(0.625));
  // Compute already longer than loading: nothing more hides.
  CHECK(*ctl.decide({c}, 500, 0.15, true).hidden_ratio == doctest::Approx(0.0));
  // No repositioned segment loaded (reuse, exact hits): no ratio to choose.
  CHECK_FALSE(ctl.decide({candidate(KvTier::device, 16000, 200)}, 0, 0.15, true).hidden_ratio.has_value());
}

TEST_CASE("loading controller: a profile without a measured T(cached, computed) is refused") {
  CHECK_THROWS_AS(LoadingController(rates(1, 1, 1, 1), PrefillCostModel{}, 4), Error);
}

TEST_CASE("loading controller: tier read rates survive JSON, and a bad field is named") {
  const TierReadRates r = rates(2e6, 1e6, 5e5, 1e5);
  const TierReadRates back = TierReadRates::from_json(r.to_json());
  CHECK(back.to_json() == r.to_json());
  CHECK(back.disk_cold_mb_s == doctest::Approx(100));
  nlohmann::json bad = r.to_json();
  bad["host_mb_s"] = "fast";
  CHECK_THROWS_WITH_AS(TierReadRates::from_json(bad), doctest::Contains("host_mb_s"), Error);
}

namespace {

test::RagMini& mini() {
  static test::RagMini f;
  return f;
}

// A store of the first four rag-mini chunks, in a TempDir of the test's own.
struct MiniStore {
  test::TempDir dir{"loadctl-store"};
  MiniStore() {
    test::RagMini& f = mini();
    const KvStore store = KvStore::open_for_write(dir.path, CacheKeys(*f.model, *f.format).store_info());
    REQUIRE(precompute_chunks(*f.model, *f.format, store, f.pick({0, 1, 2, 3})).computed == 4);
  }
  KvStore open() const {
    test::RagMini& f = mini();
    return KvStore::open_for_read(dir.path, CacheKeys(*f.model, *f.format).model_fingerprint());
  }
};

ProfileGrid small_grid() {
  ProfileGrid g;
  g.alphas = {0, 64};
  g.betas = {8, 64};
  g.repetitions = 1;
  return g;
}

}  // namespace

TEST_CASE("loading controller: the machine profile is measured once, kept, and remeasured for another model" * doctest::test_suite("real-model")) {
  test::RagMini& f = mini();
  const MiniStore s;
  const KvStore store = s.open();
  const test::TempDir dir("loadctl-profile");
  const fs::path path = dir.path / "machine.json";
  const std::string fp = CacheKeys(*f.model, *f.format).model_fingerprint();
  // Without a store: no disk rates; with one, the tiers are measured again (T is kept).
  const MachineProfile a = load_or_profile_machine(path, *f.model, fp, nullptr, small_grid());
  CHECK(a.measured_prefill);
  CHECK(a.measured_tiers);
  CHECK_FALSE(a.tiers.has_disk());
  CHECK(a.tiers.host_mb_s > 0);
  const MachineProfile b = load_or_profile_machine(path, *f.model, fp, &store, small_grid());
  CHECK_FALSE(b.measured_prefill);
  CHECK(b.measured_tiers);
  REQUIRE(b.tiers.has_disk());
  CHECK(b.tiers.kv_dtype == "f16");
  CHECK(b.prefill.to_json() == a.prefill.to_json());
  // Read back: nothing measured, the same figures.
  const MachineProfile c = load_or_profile_machine(path, *f.model, fp, &store, small_grid());
  CHECK_FALSE(c.measured_prefill);
  CHECK_FALSE(c.measured_tiers);
  CHECK(c.tiers.to_json() == b.tiers.to_json());
  // PGDSF's reader keeps the tier rates in the file.
  bool measured = true;
  load_or_profile_prefill_cost(path, *f.model, fp, &measured, small_grid());
  CHECK_FALSE(measured);
  CHECK_FALSE(load_or_profile_machine(path, *f.model, fp, &store, small_grid()).measured_tiers);
  // Another model's file is measured anew and replaced.
  const MachineProfile other = load_or_profile_machine(path, *f.model, fp + "x", &store, small_grid());
  CHECK(other.measured_prefill);
  CHECK(other.measured_tiers);
  // A damaged file, or a damaged tiers part, is an error naming it.
  std::ofstream(path) << "{not json";
  CHECK_THROWS_WITH_AS(load_or_profile_machine(path, *f.model, fp, &store, small_grid()),
                       doctest::Contains("machine.json"), Error);
  nlohmann::json j = {{"model", fp}, {"backend", f.model->backend().name()}, {"profile", a.prefill.to_json()},
                      {"tiers", {{"device_mb_s", -1}}}};
  std::ofstream(path) << j.dump();
  CHECK_THROWS_WITH_AS(load_or_profile_machine(path, *f.model, fp, &store, small_grid()),
                       doctest::Contains("machine.json"), Error);
}

TEST_CASE("loading controller: segments it recomputes give full's answer, and those it loads the cache's" * doctest::test_suite("real-model")) {
  test::RagMini& f = mini();
  const MiniStore s;
  const KvStore store = s.open();
  KvTiers tiers(store);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  const auto ctx = f.pick({2, 0, 3});
  auto opts = [](ReuseMode m, const LoadingController* ctl, bool apply = true) {
    AnswerOptions o;
    o.mode = m;
    o.gen.max_tokens = 8;
    o.load_control = ctl;
    o.apply_load_control = apply;
    return o;
  };
  // A disk slower than any compute (1 byte per ms): every cached segment is recomputed.
  const LoadingController slow(rates(1, 1, 1, 1), one_ms_per_token(), f.model->config().n_layer);
  // Disk as fast as memory: every one is loaded.
  const LoadingController fast(rates(1e9, 1e9, 1e9, 1e9), one_ms_per_token(), f.model->config().n_layer);
  const AnswerRecord full = ans.answer(f.questions[3], ctx, opts(ReuseMode::full, nullptr));

  // prefix: the exact path computed instead of loaded is full's prefill, bit for bit.
  const AnswerRecord pre = ans.answer(f.questions[3], ctx, opts(ReuseMode::prefix, &slow));
  REQUIRE(pre.load_control.has_value());
  CHECK(pre.load_control->segments.size() == 2);  // [prefix][chunk 1]
  CHECK(pre.load_control->recomputed() == 2);
  CHECK(pre.cache.hits() == 0);
  CHECK(pre.prefill.reused_tokens == 0);
  CHECK(pre.first_logits == full.first_logits);
  CHECK(pre.output_ids == full.output_ids);

  // reuse with every segment recomputed computes the whole prompt: full's answer (only the
  // grouping of rows into products differs, as for blend at r = 1).
  const AnswerRecord reuse_all = ans.answer(f.questions[3], ctx, opts(ReuseMode::reuse, &slow));
  REQUIRE(reuse_all.load_control.has_value());
  CHECK(reuse_all.load_control->recomputed() == 4);  // prefix + 3 chunks
  CHECK(reuse_all.load_control->applied);
  CHECK(reuse_all.prefill.reused_tokens == 0);
  CHECK(reuse_all.output_ids == full.output_ids);
  CHECK(kl_divergence_logits(full.first_logits, reuse_all.first_logits) < 1e-5);
  const nlohmann::json m = reuse_all.metrics()["load_control"];
  CHECK(m["segments"].size() == 4);
  CHECK(m["segments"][1]["decision"] == "recompute");
  CHECK(m["segments"][1]["tier"] == "disk");

  // Reported only: the decisions are the same, every cache is still used.
  const AnswerRecord reported = ans.answer(f.questions[3], ctx, opts(ReuseMode::reuse, &slow, false));
  CHECK(reported.load_control->recomputed() == 4);
  CHECK_FALSE(reported.load_control->applied);
  CHECK(reported.cache.hits() == 4);

  // Every segment loaded: the answer without the controller, bit for bit (only the loader's depth may differ).
  const AnswerRecord plain = ans.answer(f.questions[3], ctx, opts(ReuseMode::reuse, nullptr));
  const AnswerRecord loaded = ans.answer(f.questions[3], ctx, opts(ReuseMode::reuse, &fast));
  CHECK(loaded.load_control->recomputed() == 0);
  CHECK(loaded.load_control->loader_depth >= 2);
  CHECK(loaded.cache.hits() == 4);
  CHECK(loaded.first_logits == plain.first_logits);
  // reuse without recompute is not full: the recomputing controller above did change the answer's source.
  CHECK(kl_divergence_logits(full.first_logits, plain.first_logits) >
        kl_divergence_logits(full.first_logits, reuse_all.first_logits));
}
