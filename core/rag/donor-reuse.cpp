// Donor reuse: the alignment, the donor's choice, and the repaired build as a blend prefill of
// [prefix][the new chunk's spans] whose aligned spans come from the donor's cache.
#include "core/rag/donor-reuse.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "core/kv/segment-kv.h"
#include "core/rag/fusor.h"
#include "core/rag/plan.h"
#include "core/format/checksum.h"
#include "core/util/error.h"
#include "retrieval/chunker.h"

namespace ragkv {

std::vector<AlignedSpan> align_tokens(std::span<const int32_t> now, std::span<const int32_t> before, size_t max_cells) {
  const size_t n = now.size(), m = before.size();
  std::vector<AlignedSpan> out;
  if (n == 0 || m == 0 || (n + 1) > max_cells / (m + 1)) return out;
  // lcs[i][j]: the longest common subsequence of now[i:] and before[j:]; walking it forwards
  // from (0, 0) takes a match as soon as one is on an optimal path (the earliest).
  std::vector<uint32_t> lcs((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return lcs[i * (m + 1) + j]; };
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      at(i, j) = now[i] == before[j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
  size_t i = 0, j = 0;
  while (i < n && j < m) {
    if (now[i] == before[j] && at(i, j) == at(i + 1, j + 1) + 1) {
      if (!out.empty() && out.back().begin + out.back().n == int64_t(i) && out.back().donor_begin + out.back().n == int64_t(j))
        ++out.back().n;
      else
        out.push_back({int64_t(i), int64_t(j), 1});
      ++i;
      ++j;
    } else if (at(i + 1, j) >= at(i, j + 1)) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

namespace {

// The distinct token bigrams of ids, as sorted 64-bit keys: the cheap first filter before the alignment.
std::vector<uint64_t> bigrams(const std::vector<int32_t>& ids) {
  std::vector<uint64_t> s;
  for (size_t i = 0; i + 1 < ids.size(); ++i) s.push_back(uint64_t(uint32_t(ids[i])) << 32 | uint32_t(ids[i + 1]));
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

size_t shared_count(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  size_t n = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] < b[j]) ++i;
    else if (b[j] < a[i]) ++j;
    else ++n, ++i, ++j;
  }
  return n;
}

constexpr size_t kAligned = 3;  // donors aligned per chunk: the best three by shared bigrams

}  // namespace

DonorFinder::DonorFinder(const PromptFormat& format, const CacheKeys& keys, const KvStore& store,
                         const std::vector<Chunk>& previous, DonorParams params)
    : format_(format), keys_(keys), store_(store), params_(params) {
  for (const Chunk& c : previous) by_doc_[c.doc].push_back(&c);
}

std::optional<DonorMatch> DonorFinder::find(const Chunk& c, const std::vector<int32_t>& ids) const {
  const auto it = by_doc_.find(c.doc);
  if (it == by_doc_.end() || ids.size() < 2) return std::nullopt;
  const std::vector<uint64_t> mine = bigrams(ids);
  std::vector<std::pair<size_t, const Chunk*>> ranked;  // shared bigrams, candidate
  for (const Chunk* d : it->second) {
    auto [t, fresh] = tokens_.try_emplace(d);
    if (fresh) {
      t->second.ids = format_.chunk_ids(*d);
      t->second.bigrams = bigrams(t->second.ids);
    }
    const std::vector<int32_t>& dids = t->second.ids;
    if (d->id == c.id && dids == ids) continue;  // itself: its canonical cache is what is missing
    const size_t shared = shared_count(mine, t->second.bigrams);
    if (shared == 0) continue;
    std::error_code ec;
    if (!std::filesystem::exists(store_.chunk_path(keys_.chunk(d->id, dids)), ec)) continue;
    ranked.push_back({shared, d});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (ranked.size() > kAligned) ranked.resize(kAligned);
  std::optional<DonorMatch> best;
  for (const auto& [bg, d] : ranked) {
    const std::vector<int32_t>& dids = tokens_.at(d).ids;
    DonorMatch m;
    m.donor = d;
    m.key = keys_.chunk(d->id, dids);
    m.spans = align_tokens(ids, dids);
    for (const AlignedSpan& s : m.spans) m.shared += s.n;
    if (!best || m.shared > best->shared) best = std::move(m);
  }
  if (!best || double(best->shared) < params_.min_shared * double(ids.size())) return std::nullopt;
  return best;
}

DonorBuild build_from_donor(const Model& model, const PromptFormat& format, const CacheKeys& keys, const KvStore& store,
                            const DonorMatch& match, const std::string& chunk_id, const std::vector<int32_t>& ids,
                            const DonorParams& params, KvCache& kv, Workspace& ws) {
  const int64_t n_prefix = int64_t(format.prefix_ids().size());
  const int64_t n = int64_t(ids.size());
  if (n < 2) fail("internal: donor reuse for chunk '{}' of {} tokens", chunk_id, n);
  std::optional<ChunkKvReader> file = store.open_chunk(match.key);
  if (!file) throw CacheFileError(fmt::format("{}: the donor cache of chunk '{}' is gone", store.dir().string(), chunk_id));
  const std::shared_ptr<const HostSegmentKv> donor = HostSegmentKv::load(*file);  // every layer verified
  const ChunkKvMeta& dm = donor->meta();
  const size_t d = dm.kv_dim();
  const size_t layer_elems = donor->layer_bytes() / sizeof(uint16_t);  // K then V, [n_tokens][d] each

  // The prompt: [prefix][the chunk's tokens but the last, cut at the spans' edges][its last token],
  // the last a question segment (computed: the prefill ends on a computed row).
  RagPrompt prompt;
  prompt.ids = format.prefix_ids();
  prompt.ids.insert(prompt.ids.end(), ids.begin(), ids.end());
  prompt.segments.push_back({PromptSegment::Kind::prefix, "", format.prefix_ids(), 0});
  std::map<int64_t, std::shared_ptr<const SegmentKv>> span_kv;  // by the segment's begin
  span_kv[0] = HostSegmentKv::from_rows(model.backend(), keys.prefix(), kv.k, kv.v, 0);
  auto add_segment = [&](int64_t b, int64_t e, const AlignedSpan* span) {
    if (e <= b) return;
    PromptSegment seg{PromptSegment::Kind::chunk, chunk_id, std::vector<int32_t>(ids.begin() + b, ids.begin() + e), n_prefix + b};
    if (span) {  // the donor's rows [donor_begin + (b − begin), …): K as it was computed, at its own positions
      ChunkKvMeta m = dm;
      m.n_tokens = uint32_t(e - b);
      m.first_pos = int32_t(n_prefix + span->donor_begin + (b - span->begin));
      std::vector<uint16_t> data(size_t(dm.n_layer) * 2 * size_t(e - b) * d);
      const size_t first = size_t(span->donor_begin + (b - span->begin)), rows = size_t(e - b);
      std::vector<uint16_t> unused;  // (the host tier serves its own memory)
      for (uint32_t l = 0; l < dm.n_layer; ++l) {
        const uint16_t* k = donor->host_layer(int(l), unused).k;
        const uint16_t* v = k + layer_elems / 2;
        uint16_t* out = data.data() + size_t(l) * 2 * rows * d;
        std::copy_n(k + first * d, rows * d, out);
        std::copy_n(v + first * d, rows * d, out + rows * d);
      }
      span_kv[seg.begin] = HostSegmentKv::from_data(std::move(m), std::move(data));
    }
    prompt.segments.push_back(std::move(seg));
  };
  int64_t at = 0;
  for (const AlignedSpan& s : match.spans) {
    add_segment(at, std::min(s.begin, n - 1), nullptr);  // inserted or changed tokens: computed
    add_segment(std::min(s.begin, n - 1), std::min(s.begin + s.n, n - 1), &s);
    at = std::min(s.begin + s.n, n - 1);
  }
  add_segment(at, n - 1, nullptr);
  prompt.segments.push_back({PromptSegment::Kind::suffix, "", {ids.back()}, n_prefix + n - 1});

  // Blend over the spans (r = 0: reuse): a span at the donor's own position before any edit is an
  // exact prefix (the knowledge-tree walk takes it as is); every later span is a candidate.
  BlendParams blend;
  blend.selection = Selection::kv;  // CacheBlend §4.1: ‖ΔK‖² + ‖ΔV‖² against the donor's KV
  blend.recompute_ratio = params.repair_ratio;
  const SegmentLookup lookup = [&span_kv](const PromptSegment& seg) -> std::shared_ptr<const SegmentKv> {
    const auto it = span_kv.find(seg.begin);
    return it == span_kv.end() ? nullptr : it->second;
  };
  const ReuseMode mode = params.repair_ratio > 0 ? ReuseMode::blend : ReuseMode::reuse;
  const PrefillPlan plan = plan_prefill(prompt, mode, blend, model.config().n_layer, lookup);
  const PrefillResult r = prefill_prompt(model, prompt, plan, kv, ws);

  DonorBuild b;
  b.computed_token_layers = r.stats.computed_token_layers;
  for (int32_t row : r.stats.final_rows) b.repaired_tokens += plan.reused[size_t(row)];
  return b;
}

}  // namespace ragkv
