// The loading controller's arithmetic (decide), and its connection to a prefill plan.
#include "core/rag/loading-controller.h"

#include <algorithm>
#include <cmath>

#include "core/kv/chunk-kv-file.h"
#include "core/util/error.h"

namespace ragkv {

size_t LoadControl::recomputed() const {
  return size_t(std::count_if(segments.begin(), segments.end(), [](const SegmentLoadDecision& d) { return d.recompute; }));
}

nlohmann::json LoadControl::to_json() const {
  nlohmann::json segs = nlohmann::json::array();
  for (const SegmentLoadDecision& d : segments) {
    nlohmann::json s = {{"segment", d.c.id},          {"tier", kv_tier_name(d.c.tier)}, {"bytes", d.c.bytes},
                        {"tokens", d.c.tokens},       {"load_ms", d.load_ms},           {"compute_ms", d.compute_ms},
                        {"decision", d.recompute ? "recompute" : "load"}};
    if (d.c.tier == KvTier::disk) s["resident"] = d.c.resident;
    segs.push_back(std::move(s));
  }
  return {{"applied", applied},
          {"pipelined", pipelined},
          {"segments", segs},
          {"recomputed_segments", recomputed()},
          {"predicted_load_ms", load_ms},
          {"predicted_compute_ms", compute_ms},
          {"predicted_prefill_ms", prefill_ms},
          {"preload_depth", preload_depth},
          {"loader_depth", loader_depth},
          {"hidden_ratio", hidden_ratio ? nlohmann::json(*hidden_ratio) : nlohmann::json(nullptr)},
          {"recompute_ratio", recompute_ratio}};
}

void LoadControlSummary::add(const LoadControl& c, double measured_load_ms, double measured_prefill_ms) {
  ++prompts_;
  for (const SegmentLoadDecision& d : c.segments) {
    ++segments_;
    recomputed_ += d.recompute;
    (d.recompute ? recompute_ : load_)[size_t(d.c.tier)] += 1;
  }
  depth_ += c.preload_depth;
  ratio_ += c.recompute_ratio;
  if (c.hidden_ratio) hidden_ += *c.hidden_ratio, ++n_hidden_;
  predicted_load_ += c.load_ms;
  predicted_prefill_ += c.prefill_ms;
  measured_load_ += measured_load_ms;
  measured_prefill_ += measured_prefill_ms;
}

nlohmann::json LoadControlSummary::to_json() const {
  auto mean = [](double s, size_t n) { return n ? nlohmann::json(s / double(n)) : nlohmann::json(nullptr); };
  nlohmann::json tiers = nlohmann::json::object();
  for (KvTier t : {KvTier::device, KvTier::host, KvTier::disk})
    tiers[kv_tier_name(t)] = {{"load", load_[size_t(t)]}, {"recompute", recompute_[size_t(t)]}};
  return {{"prompts", prompts_},
          {"segments", segments_},
          {"recomputed_segments", recomputed_},
          {"decisions_per_tier", tiers},
          {"mean_preload_depth", mean(depth_, prompts_)},
          {"mean_hidden_ratio", mean(hidden_, n_hidden_)},
          {"prompts_with_hidden_ratio", n_hidden_},
          {"mean_recompute_ratio", mean(ratio_, prompts_)},
          {"mean_predicted_load_ms", mean(predicted_load_, prompts_)},
          {"mean_measured_load_ms", mean(measured_load_, prompts_)},
          {"mean_predicted_prefill_ms", mean(predicted_prefill_, prompts_)},
          {"mean_measured_prefill_ms", mean(measured_prefill_, prompts_)}};
}

LoadingController::LoadingController(TierReadRates rates, PrefillCostModel cost, int n_layer)
    : rates_(std::move(rates)), cost_(std::move(cost)), n_layer_(std::max(1, n_layer)) {
  if (!cost_.has_grid()) fail("loading controller: the prefill cost T(cached, computed tokens) was not measured");
}

double LoadingController::compute_ms(int64_t begin, int64_t tokens) const {
  if (tokens <= 0) return 0.0;
  // The marginal cost: T is linear in β within a grid cell (and beyond its edge), so T(α, 2n) −
  // T(α, n) is n tokens' worth of its slope — without the per-call constant a Model::forward of
  // its own would add, since recomputed rows join the prompt's other rows in each layer's products.
  const double n = double(tokens);
  return std::max(0.0, cost_.estimate_ms(double(begin), 2 * n) - cost_.estimate_ms(double(begin), n));
}

LoadControl LoadingController::decide(const std::vector<LoadCandidate>& cached, double base_compute_ms,
                                      double recompute_ratio, bool pipelined, bool raise_ratio) const {
  LoadControl out;
  out.pipelined = pipelined;
  out.recompute_ratio = recompute_ratio;
  for (const LoadCandidate& c : cached) out.segments.push_back({c, load_ms(c), compute_ms(c.begin, c.tokens), false});
  auto& segs = out.segments;
  const double L = double(n_layer_);
  // The share of a loaded segment's token-layers the mode recomputes at ratio r.
  auto share = [](const LoadCandidate& c, double r) {
    return std::clamp(c.scales_with_ratio ? c.fixed + (1 - c.fixed) * r : c.fixed, 0.0, 1.0);
  };
  struct Totals {
    double load = 0, compute = 0;
  };
  auto totals = [&](double r) {
    Totals t{0, base_compute_ms};
    for (const SegmentLoadDecision& d : segs) {
      if (d.recompute) {
        t.compute += d.compute_ms;
      } else {
        t.load += d.load_ms;
        t.compute += d.compute_ms * share(d.c, r);
      }
    }
    return t;
  };
  // Pipelined: compute of layer l waits for layer l's KV, so the prefill takes the longer of the
  // two streams plus the first layer's load, which nothing hides (CacheBlend §5, Fig. 10).
  auto predict = [&](const Totals& t) {
    return pipelined ? std::max(t.load, t.compute) + t.load / L : t.load + t.compute;
  };
  constexpr double kEps = 1e-9;
  if (pipelined) {
    // Greedy: move to recompute the segment whose move shortens the prefill most, while any does.
    for (;;) {
      double best_t = predict(totals(recompute_ratio));
      size_t best = segs.size();
      for (size_t i = 0; i < segs.size(); ++i) {
        if (segs[i].recompute) continue;
        segs[i].recompute = true;
        const double t = predict(totals(recompute_ratio));
        segs[i].recompute = false;
        if (t < best_t * (1 - kEps) - kEps) best_t = t, best = i;
      }
      if (best == segs.size()) break;
      segs[best].recompute = true;
    }
  } else {
    // Dense: a leading run of k segments loaded, the rest computed; the shortest prefill, the
    // longest run among equals.
    size_t best_k = segs.size();
    double best_t = predict(totals(recompute_ratio));
    for (size_t k = segs.size(); k-- > 0;) {
      for (size_t i = 0; i < segs.size(); ++i) segs[i].recompute = i >= k;
      const double t = predict(totals(recompute_ratio));
      if (t < best_t * (1 - kEps) - kEps) best_t = t, best_k = k;
    }
    for (size_t i = 0; i < segs.size(); ++i) segs[i].recompute = i >= best_k;
  }

  // CacheBlend §5.1: the r whose recompute delay equals the loading delay, T_recompute(r) =
  // r × Prefill(reused tokens) (footnote 5), here with blend's check layers (which compute every
  // candidate) and the rows computed anyway on the compute side: solve A = C_fixed + r·D.
  if (pipelined) {
    double a = 0, fixed = base_compute_ms, scaled = 0;
    for (const SegmentLoadDecision& d : segs) {
      if (d.recompute) {
        fixed += d.compute_ms;
        continue;
      }
      a += d.load_ms;
      fixed += d.compute_ms * std::clamp(d.c.fixed, 0.0, 1.0);
      if (d.c.scales_with_ratio) scaled += d.compute_ms * (1 - std::clamp(d.c.fixed, 0.0, 1.0));
    }
    if (scaled > 0) out.hidden_ratio = std::clamp((a - fixed) / scaled, 0.0, 1.0);
  }
  if (raise_ratio && out.hidden_ratio && *out.hidden_ratio > recompute_ratio) out.recompute_ratio = *out.hidden_ratio;

  const Totals t = totals(out.recompute_ratio);
  out.load_ms = t.load;
  out.compute_ms = t.compute;
  out.prefill_ms = predict(t);
  // Cache-Craft Eq. 16 / Algorithm 2 line 1: L_p = max(1, (L − 1)(1 − T_prefill / T_load) + 1),
  // rounded up to whole layers.
  if (t.load > 0) {
    const double lp = (L - 1) * (1 - t.compute / t.load) + 1;
    out.preload_depth = int(std::clamp(std::ceil(lp - 1e-9), 1.0, L));
  }
  return out;
}

PlanLoad plan_load(const LoadingController& ctl, const RagPrompt& prompt, const PrefillPlan& plan) {
  PlanLoad pl;
  pl.pipelined = plan.sparse();
  // Dense plans load only their leading groups; sparse ones every cached segment.
  const size_t loaded_end = pl.pipelined              ? plan.segments.size()
                            : plan.loaded_groups == 0 ? 0
                                                      : plan.dense_groups[plan.loaded_groups - 1].second;
  const double L = double(ctl.n_layer());
  const bool blend_rows = plan.mode == ReuseMode::blend || plan.mode == ReuseMode::auto_;
  const double checked = !plan.checks.empty() ? double(plan.checks.back().layer + 1) / L : 0.0;
  for (size_t s = 0; s < plan.segments.size(); ++s) {
    const SegmentPlan& sp = plan.segments[s];
    if (!sp.kv || s >= loaded_end) {
      pl.base_compute_ms += ctl.compute_ms(sp.begin, sp.n_tokens);
      continue;
    }
    LoadCandidate c;
    c.segment = s;
    c.id = prompt.segments[s].kind == PromptSegment::Kind::prefix ? std::string(kPrefixChunkId) : prompt.segments[s].chunk_id;
    c.tier = sp.kv->tier();
    c.bytes = sp.kv->bytes();
    c.begin = sp.begin;
    c.tokens = sp.n_tokens;
    if (c.tier == KvTier::disk)
      if (const auto* disk = dynamic_cast<const DiskSegmentKv*>(sp.kv.get())) c.resident = disk->reader().resident_fraction();
    if (pl.pipelined && !sp.exact()) {
      if (sp.choice || plan.mode == ReuseMode::craft) {
        c.fixed = sp.n_tokens > 0 ? double(sp.fix.size()) / double(sp.n_tokens) : 0.0;  // craft's fix tokens
      } else if (blend_rows) {
        c.scales_with_ratio = true;  // blend: every candidate on layers 0..last check, then r of them
        c.fixed = plan.pre_select ? 0.0 : checked;
      }
    }
    pl.cached.push_back(std::move(c));
  }
  return pl;
}

void apply_load_control(LoadControl& control, PrefillPlan& plan, int min_depth) {
  for (const SegmentLoadDecision& d : control.segments)
    if (d.recompute) plan.compute_instead(d.c.segment);
  if (control.recompute_ratio != plan.blend.recompute_ratio) plan.set_recompute_ratio(control.recompute_ratio);
  plan.blend.preload_depth = std::max(control.preload_depth, min_depth);
  control.loader_depth = plan.blend.preload_depth;
  control.applied = true;
}

}  // namespace ragkv
