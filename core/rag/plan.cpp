// plan_prefill: cache lookup per segment, then the rows and schedule of the mode.
#include "core/rag/plan.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include <fmt/ranges.h>

#include "core/format/checksum.h"
#include "core/util/enum-names.h"
#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr EnumNames<Selection, 9> kSelectionNames{{{
    {Selection::kv, "kv"},
    {Selection::v, "v"},
    {Selection::head_v, "head-v"},
    {Selection::random, "random"},
    {Selection::question, "question"},
    {Selection::sink, "sink"},
    {Selection::sink_v, "sink+v"},
    {Selection::question_v, "question+v"},
    {Selection::prophet, "prophet"},
}}};
}  // namespace

const char* selection_name(Selection s) { return kSelectionNames.name(s); }
Selection parse_selection(const std::string& s) { return kSelectionNames.parse(s, "selection method"); }
std::vector<std::string> selection_names() { return kSelectionNames.names(); }

void CacheCounts::add_hit(KvTier t, int n) {
  switch (t) {
    case KvTier::device: device_hits += n; break;
    case KvTier::host: host_hits += n; break;
    case KvTier::disk: disk_hits += n; break;
  }
}

int64_t PrefillPlan::reused_tokens() const {
  int64_t n = 0;
  for (const SegmentPlan& s : segments)
    if (s.kv) n += s.n_tokens;
  return n;
}

std::vector<size_t> PrefillPlan::cached_segments(size_t first, size_t last) const {
  std::vector<size_t> out;
  for (size_t s = first; s < std::min(last, segments.size()); ++s)
    if (segments[s].kv) out.push_back(s);
  return out;
}

// CacheBlend §4.3: "pick r_1 % … with r_1 slightly higher than r … r_2 slightly less than r_1".
// The i-th of c check layers keeps r·(1 + (c − 1 − i)/c): for c = 3, 1.67r, 1.33r, r.
std::vector<double> gradual_filter_fractions(double r, int checks) {
  std::vector<double> f;
  for (int i = 0; i < checks; ++i) f.push_back(std::min(1.0, r * (1.0 + double(checks - 1 - i) / checks)));
  return f;
}

std::vector<int32_t> top_k_indices(const std::vector<float>& values, size_t keep) {
  std::vector<int32_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  keep = std::min(keep, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  idx.resize(keep);
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<int32_t> select_hkvd_rows(const std::vector<int32_t>& active, const std::vector<uint8_t>& candidate,
                                      const std::vector<float>& deviation, size_t keep) {
  std::vector<float> dev;
  std::vector<int32_t> cand_idx, out;
  for (size_t i = 0; i < active.size(); ++i) {
    if (candidate[size_t(active[i])]) {
      cand_idx.push_back(int32_t(i));
      dev.push_back(deviation[i]);
    } else {
      out.push_back(int32_t(i));
    }
  }
  for (int32_t t : top_k_indices(dev, keep)) out.push_back(cand_idx[size_t(t)]);
  std::sort(out.begin(), out.end());
  return out;
}

size_t adaptive_keep(const std::vector<int32_t>& active, const std::vector<uint8_t>& candidate,
                     const std::vector<float>& score, size_t keep, double mass) {
  if (mass <= 0) return keep;
  std::vector<float> s;
  for (size_t i = 0; i < active.size(); ++i)
    if (candidate[size_t(active[i])]) s.push_back(std::max(score[i], 0.f));
  std::sort(s.begin(), s.end(), std::greater<>());
  const double total = std::accumulate(s.begin(), s.end(), 0.0);
  size_t k = 0;
  for (double acc = 0; k < s.size() && acc < mass * total; ++k) acc += s[k];
  return std::clamp(k, keep / 2, std::min(2 * keep, s.size()));
}

namespace {

// Rows and schedule from the segments' sources (see PrefillPlan).
// Every row of a reused segment becomes a candidate for selection, active until selection drops it.
void add_candidates(PrefillPlan& p, const SegmentPlan& seg) {
  for (int64_t i = seg.begin; i < seg.end(); ++i) {
    p.candidate[size_t(i)] = 1;
    ++p.n_candidates;
    p.active.push_back(int32_t(i));
  }
}

void derive_rows(PrefillPlan& p) {
  const size_t n_seg = p.segments.size();
  p.dense_groups.clear();
  for (size_t s = 0; s < n_seg; ++s) p.dense_groups.push_back({s, s + 1});
  p.loaded_groups = 0;
  if (p.mode == ReuseMode::prefix) {
    // Leading groups whose segments all have exact caches are loaded; the question is always computed.
    for (const auto& [first, last] : p.dense_groups) {
      bool all = last < n_seg;
      for (size_t s = first; s < last && all; ++s) all = p.segments[s].exact();
      if (!all) break;
      ++p.loaded_groups;
    }
  }

  const size_t n = size_t(p.n_tokens);
  p.active.clear();
  p.candidate.assign(n, 0);
  p.reused.assign(n, 0);
  p.n_candidates = p.n_forced = 0;
  p.checks.clear();
  p.pre_select = false;
  p.pre_keep = 0;
  for (const SegmentPlan& seg : p.segments)
    if (seg.kv) std::fill(p.reused.begin() + seg.begin, p.reused.begin() + seg.end(), uint8_t(1));
  if (!p.sparse()) return;
  if (p.mode == ReuseMode::craft && p.craft.question_tokens) {
    // craft/prophet: the variants and their CFO budget, Σ⌈CFO·|C|⌉ tokens, chosen among all the
    // repositioned chunks' tokens by the question's attention (blend's prophet, two passes).
    size_t budget = 0;
    for (const SegmentPlan& seg : p.segments) {
      if (!seg.kv) {
        for (int64_t i = seg.begin; i < seg.end(); ++i) p.active.push_back(int32_t(i));
      } else if (!seg.exact()) {
        budget += seg.fix.size();
        add_candidates(p, seg);
      }
    }
    p.pre_select = p.n_candidates > 0;
    p.pre_keep = std::min(budget, size_t(p.n_candidates));
    return;
  }
  if (p.mode == ReuseMode::craft) {
    // Cache-Craft §3.2.1: each repositioned chunk's fix tokens on every layer (until the focus
    // cut-off); an exact chain is reused as is; nothing is scored.
    for (const SegmentPlan& seg : p.segments) {
      if (!seg.kv) {
        for (int64_t i = seg.begin; i < seg.end(); ++i) p.active.push_back(int32_t(i));
      } else if (!seg.exact()) {
        for (int32_t t : seg.fix) p.active.push_back(int32_t(seg.begin + t));
        p.n_forced += int64_t(seg.fix.size());
      }
    }
    return;
  }
  const bool recompute = p.mode == ReuseMode::blend || p.mode == ReuseMode::auto_;
  const Selection sel = p.blend.selection;
  const bool with_sinks = recompute && (sel == Selection::sink || sel == Selection::sink_v);
  const bool scored = recompute && sel != Selection::sink;
  // auto with prophet (its default selection): a chunk with variant metadata brings its CFO budget,
  // ⌈CFO·|C|⌉ tokens, to the question's choice among all repositioned tokens — craft/prophet's rule,
  // which beat both Cache-Craft's CCI-ranked fix and blend on SQuAD 200 (bench/results/README.md,
  // "Chunk-KV reuse fidelity"); with another selection, craft's CCI-ranked fix tokens are
  // recomputed as they are.
  const bool craft_by_question = p.mode == ReuseMode::auto_ && sel == Selection::prophet;
  int64_t n_repositioned = 0, n_fixed = 0, craft_budget = 0;
  for (const SegmentPlan& seg : p.segments) {
    if (seg.kv && !seg.exact() && seg.choice && craft_by_question) {
      craft_budget += int64_t(seg.fix.size());
      add_candidates(p, seg);
      continue;
    }
    if (seg.kv && !seg.exact() && seg.choice) {  // auto: craft's fix for a chunk with metadata
      for (int32_t t : seg.fix) p.active.push_back(int32_t(seg.begin + t));
      n_fixed += int64_t(seg.fix.size());
      continue;
    }
    const bool repositioned = seg.kv && !seg.exact();
    int64_t sinks = 0;  // EPIC (LegoLink): the first tokens of a chunk computed alone grow its own
                        // attention sink; recomputing them in place removes it
    if (repositioned && with_sinks) {
      const int64_t k = p.blend.sink_tokens > 0 ? p.blend.sink_tokens
                        : sel == Selection::sink
                            ? int64_t(std::ceil(p.blend.recompute_ratio * double(seg.n_tokens)))
                            : 4;
      sinks = std::min(seg.n_tokens, k);
    }
    for (int64_t i = seg.begin; i < seg.end(); ++i) {
      if (repositioned) {
        ++n_repositioned;
        if (i - seg.begin < sinks) {
          ++p.n_forced;
          p.active.push_back(int32_t(i));
        } else {
          p.candidate[size_t(i)] = 1;
          ++p.n_candidates;
          if (scored) p.active.push_back(int32_t(i));
        }
      } else if (!seg.kv) {
        p.active.push_back(int32_t(i));
      }
    }
  }
  const int64_t n_sinks = p.n_forced;  // the selection's budget covers the sinks, not craft's fix
  p.n_forced += n_fixed;
  if (!scored) return;
  if (sel == Selection::prophet) {
    p.pre_select = true;
    p.pre_keep = size_t(std::clamp<int64_t>(
        std::llround(p.blend.recompute_ratio * double(n_repositioned)) + craft_budget, 0, p.n_candidates));
    return;
  }
  std::vector<int> layers = p.blend.check_at;
  if (layers.empty()) {
    const int checks = std::clamp(p.blend.check_layers, 1, std::max(1, p.n_layer - 1));
    for (int c = 1; c <= checks; ++c) layers.push_back(c);
  }
  for (size_t c = 0; c < layers.size(); ++c)
    if (layers[c] < 1 || layers[c] >= p.n_layer || (c > 0 && layers[c] <= layers[c - 1]))
      fail("check layers must ascend within 1..{} (layer 0's KV does not depend on the context), got {}",
           p.n_layer - 1, fmt::join(layers, ","));
  // The budget of each check layer covers every repositioned token; sink rows are part of it.
  const std::vector<double> keep = gradual_filter_fractions(p.blend.recompute_ratio, int(layers.size()));
  for (size_t c = 0; c < layers.size(); ++c) {
    const int64_t want = std::llround(keep[c] * double(n_repositioned)) - n_sinks;
    p.checks.push_back({layers[c], size_t(std::clamp<int64_t>(want, 0, p.n_candidates))});
  }
}

}  // namespace

void PrefillPlan::drop_cache(size_t segment) { release_cache(segment, true); }
void PrefillPlan::compute_instead(size_t segment) { release_cache(segment, false); }

void PrefillPlan::set_recompute_ratio(double r) {
  blend.recompute_ratio = r;
  derive_rows(*this);
}

void PrefillPlan::release_cache(size_t segment, bool bad) {
  SegmentPlan& s = segments.at(segment);
  if (!s.kv) return;
  if (s.exact()) --counts.exact_hits;
  counts.add_hit(s.kv->tier(), -1);
  if (bad) ++counts.bad;
  s.kv.reset();
  if (segment < exact_path) {
    // The path ends here. `prefix` loads only a leading run, so the path's later segments are
    // computed too: no longer hits (nor bad).
    if (mode == ReuseMode::prefix)
      for (size_t t = segment + 1; t < exact_path; ++t) {
        SegmentPlan& later = segments[t];
        if (!later.kv) continue;
        --counts.exact_hits;
        counts.add_hit(later.kv->tier(), -1);
        later.kv.reset();
      }
    exact_path = segment;
  }
  derive_rows(*this);
}

SegmentLookup tier_lookup(const CacheKeys& keys, const KvTiers* tiers) {
  if (!tiers) return {};
  return [&keys, tiers](const PromptSegment& seg) -> std::shared_ptr<const SegmentKv> {
    if (seg.kind == PromptSegment::Kind::turn) return nullptr;  // a conversation's text: never cached
    const ChunkKvMeta key = keys.segment(seg);
    std::shared_ptr<const SegmentKv> kv = tiers->find(key);
    if (!kv && seg.kind == PromptSegment::Kind::chunk) kv = tiers->find(keys.donor(key));
    return kv;
  };
}

ChainLookup tier_chain_lookup(const CacheKeys& keys, const KvTiers* tiers) {
  if (!tiers) return {};
  return [&keys, tiers](const PromptSegment& seg, const std::vector<std::string>& chain) {
    return tiers->find(keys.chain_node(seg, chain));
  };
}

VariantSource tier_variants(const CacheKeys& keys, const KvTiers* tiers) {
  VariantSource v;
  if (!tiers) return v;
  v.candidates = [&keys, tiers](const PromptSegment& seg) {
    std::vector<VariantCandidate> out;
    const ChunkKvMeta canonical = keys.segment(seg);
    std::error_code ec;
    if (!tiers->store().foreign()) {
      if (std::filesystem::exists(tiers->store().chunk_path(canonical), ec))
        out.push_back({canonical, std::nullopt});
      else if (const ChunkKvMeta donor = keys.donor(canonical); std::filesystem::exists(tiers->store().chunk_path(donor), ec))
        out.push_back({donor, std::nullopt});
    }
    for (ChunkKvReader& r : tiers->store().variants(canonical)) out.push_back({r.meta(), r.stats()});
    return out;
  };
  v.open = [tiers](const ChunkKvMeta& key) { return tiers->find(key); };
  return v;
}

PrefillPlan plan_prefill(const RagPrompt& prompt, ReuseMode mode, const BlendParams& blend, int n_layer,
                         const SegmentLookup& lookup, const VariantSource* variants, const CraftParams& craft, const ChainLookup& chain,
                         const std::vector<std::shared_ptr<const SegmentKv>>& carried) {
  if (prompt.segments.empty() || prompt.segments.back().kind != PromptSegment::Kind::suffix ||
      prompt.segments.back().ids.empty())
    fail("internal: a RAG prompt must end with a non-empty question segment");
  PrefillPlan p;
  p.mode = mode;
  p.blend = blend;
  p.craft = craft;
  p.n_layer = n_layer;
  p.n_tokens = prompt.n_tokens();
  std::vector<std::string> before;  // chunk ids so far
  for (const PromptSegment& seg : prompt.segments) {
    SegmentPlan sp;
    sp.begin = seg.begin;
    sp.n_tokens = int64_t(seg.ids.size());
    sp.context = before;
    p.segments.push_back(std::move(sp));
    if (seg.kind == PromptSegment::Kind::chunk) before.push_back(seg.chunk_id);
  }
  if (mode == ReuseMode::full || !lookup) {
    derive_rows(p);
    return p;
  }

  // RAGCache §5.1: the longest exact path of the knowledge tree, matched segment by segment from
  // the root (the prefix); the traversal stops at the first segment without an exact node.
  bool path_missed = false;
  size_t rest = 0;  // the first segment the sparse modes look up after the path
  if (p.sparse())  // a conversation's previous turn: its segments reused as they are
    for (; rest < carried.size() && rest + 1 < prompt.segments.size(); ++rest) {
      SegmentPlan& sp = p.segments[rest];
      sp.kv = carried[rest];
      if (!sp.exact() || sp.kv->meta().n_tokens != uint32_t(sp.n_tokens))
        fail("internal: the previous turn's KV of segment {} is not this prompt's", rest);
      p.counts.add_hit(sp.kv->tier());
      ++p.counts.exact_hits;
      if (mode == ReuseMode::craft || mode == ReuseMode::auto_) {
        VariantChoice exact;
        exact.exact = true;
        sp.choice = exact;
      }
    }
  const bool from_previous_turn = rest > 0;
  for (size_t s = 0; !from_previous_turn && s + 1 < prompt.segments.size(); ++s) {
    const PromptSegment& seg = prompt.segments[s];
    SegmentPlan& sp = p.segments[s];
    if (s > 0 && seg.kind != PromptSegment::Kind::chunk) break;
    std::shared_ptr<const SegmentKv> kv;
    try {
      if (sp.context.empty())
        kv = lookup(seg);  // the prefix, chunk 1: canonical caches are computed exactly there
      else if (chain)
        kv = chain(seg, sp.context);
      else
        break;
    } catch (const CacheFileError&) {
      ++p.counts.bad;
      if (sp.context.empty()) rest = s + 1;  // that canonical cache is bad: computed, not looked up again
      break;
    }
    if (!kv) {
      path_missed = true;
      break;
    }
    sp.kv = std::move(kv);
    if (!sp.exact()) {  // a cache, but not for this position (cannot happen for a sound store)
      sp.kv.reset();
      break;
    }
    p.counts.add_hit(sp.kv->tier());
    ++p.counts.exact_hits;
    p.exact_path = rest = s + 1;
  }
  if (mode == ReuseMode::prefix) {
    if (path_missed) ++p.counts.misses;
    derive_rows(p);
    return p;
  }
  if (mode == ReuseMode::craft || mode == ReuseMode::auto_)
    for (size_t s = 1; s < p.exact_path; ++s) {  // Cache-Craft's exact chain: reused as is, CFO 0
      VariantChoice exact;
      exact.exact = true;
      p.segments[s].choice = exact;
    }

  if ((mode == ReuseMode::craft || mode == ReuseMode::auto_) && variants && variants->candidates) {
    for (size_t s = rest; s + 1 < prompt.segments.size(); ++s) {
      const PromptSegment& seg = prompt.segments[s];
      SegmentPlan& sp = p.segments[s];
      if (seg.kind == PromptSegment::Kind::turn) continue;  // computed, like the question
      try {
        if (seg.kind != PromptSegment::Kind::chunk) {
          sp.kv = lookup ? lookup(seg) : nullptr;
        } else {
          const std::vector<VariantCandidate> cands = variants->candidates(seg);
          if (!cands.empty()) {
            const VariantChoice c = choose_variant(cands, sp.context, sp.n_tokens, craft);
            sp.kv = variants->open(cands[c.index].key);
            const bool metadata =
                std::any_of(cands.begin(), cands.end(), [](const VariantCandidate& v) { return v.stats.has_value(); });
            if (sp.kv && (mode == ReuseMode::craft || c.exact || metadata)) {
              sp.choice = c;
              if (!c.exact)
                sp.fix = craft.random_tokens
                             ? random_fix_tokens(c.fix_tokens, sp.n_tokens, craft.seed ^ checksum64(seg.chunk_id))
                             : craft_fix_tokens(cands, c.index, c.fix_tokens, sp.n_tokens);
            }
          }
        }
      } catch (const CacheFileError&) {
        sp.kv.reset();
        ++p.counts.bad;
        continue;
      }
      if (!sp.kv) {
        ++p.counts.misses;
        continue;
      }
      p.counts.add_hit(sp.kv->tier());
      if (sp.exact()) ++p.counts.exact_hits;
    }
  } else {
    // The segments after the exact path, from their canonical caches; the question is never cached.
    for (size_t s = rest; s + 1 < prompt.segments.size(); ++s) {
      if (prompt.segments[s].kind == PromptSegment::Kind::turn) continue;  // computed, like the question
      try {
        p.segments[s].kv = lookup(prompt.segments[s]);
      } catch (const CacheFileError&) {
        ++p.counts.bad;
        continue;
      }
      if (!p.segments[s].kv) {
        ++p.counts.misses;
        continue;
      }
      p.counts.add_hit(p.segments[s].kv->tier());
      if (p.segments[s].exact()) ++p.counts.exact_hits;
    }
  }
  derive_rows(p);
  return p;
}

}  // namespace ragkv
