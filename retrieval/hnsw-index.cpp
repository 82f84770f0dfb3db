// HNSW over hnswlib: build, search, the graph file, and the staged search of RAGCache §5.3.
// The only translation unit that includes hnswlib (see hnsw-index.h).
//
// Graph file (framed as in checked-file.h, magic "RKVHNSW\0", version 1), body:
//   u32 dim, u32 0, u64 n, u64 M, u64 max_m0, u64 ef_construction, u64 seed,
//   i32 max_level, u32 entry_point, u64 XXH64 of the rows (f32 [n][dim]) the graph was built on,
//   then per node i in 0..n: u32 level, and for each l in 0..level: u32 count, u32 ids[count].
#include "retrieval/hnsw-index.h"

#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <queue>

#include "core/util/error.h"
#include "core/format/checked-file.h"

namespace ragkv {

namespace {

using Hnsw = hnswlib::HierarchicalNSW<float>;
using hnswlib::tableint;
using DistId = std::pair<float, tableint>;
using TopHeap = std::priority_queue<DistId, std::vector<DistId>, Hnsw::CompareByFirst>;

constexpr std::string_view kMagic{"RKVHNSW\0", 8};
constexpr uint32_t kVersion = 1;
constexpr int kMaxLevel = 64;  // far above any real graph (level ~ log_M(n))

// The k best of an ef-sized candidate heap, as searchKnn extracts them: pop the worst until k
// are left, then order by (distance, label) ascending — the order searchKnnCloserFirst gives.
std::vector<Hit> top_k_of(TopHeap heap, size_t k) {
  while (heap.size() > k) heap.pop();
  std::vector<DistId> v;
  v.reserve(heap.size());
  for (; !heap.empty(); heap.pop()) v.push_back(heap.top());
  std::sort(v.begin(), v.end());
  std::vector<Hit> hits;
  hits.reserve(v.size());
  for (const auto& [d, id] : v) hits.push_back(Hit{uint32_t(id), 1.0f - d});
  return hits;
}

uint64_t rows_checksum(const Hnsw& h, size_t n, size_t dim) {
  Checksum64 c;
  for (size_t i = 0; i < n; ++i) c.update(h.getDataByInternalId(tableint(i)), dim * sizeof(float));
  return c.digest();
}

}  // namespace

struct HnswIndex::Impl {
  std::unique_ptr<hnswlib::InnerProductSpace> space;  // outlives hnsw (declared first)
  std::unique_ptr<Hnsw> hnsw;
  HnswParams params;
  size_t n = 0, dim = 0;

  void create(size_t n_, size_t dim_, const HnswParams& p) {
    if (n_ == 0) fail("HNSW index: no vectors to index");
    if (dim_ == 0) fail("HNSW index: dimension 0");
    if (p.M < 2 || p.M > 10000) fail("HNSW index: M must be in [2, 10000], got {}", p.M);
    if (p.ef_search == 0) fail("HNSW index: ef_search must be >= 1");
    n = n_, dim = dim_, params = p;
    space = std::make_unique<hnswlib::InnerProductSpace>(dim);
    hnsw = std::make_unique<Hnsw>(space.get(), n, p.M, p.ef_construction, p.seed);
    hnsw->metric_distance_computations = 0;  // hnswlib leaves its search counters uninitialised
    hnsw->metric_hops = 0;
    hnsw->setEf(p.ef_search);
  }
};

HnswIndex::HnswIndex() : impl_(std::make_unique<Impl>()) {}
HnswIndex::~HnswIndex() = default;

size_t HnswIndex::size() const { return impl_->n; }
size_t HnswIndex::dim() const { return impl_->dim; }
const HnswParams& HnswIndex::params() const { return impl_->params; }
void HnswIndex::set_ef_search(size_t ef) {
  if (ef == 0) fail("HNSW index: ef_search must be >= 1");
  impl_->params.ef_search = ef;
  impl_->hnsw->setEf(ef);
}

std::unique_ptr<HnswIndex> HnswIndex::build(std::span<const float> rows, size_t dim, const HnswParams& p,
                                            const std::function<void(size_t, size_t)>& progress) {
  if (dim == 0 || rows.size() % dim != 0)
    fail("HNSW index: {} floats is not a whole number of rows of dimension {}", rows.size(), dim);
  std::unique_ptr<HnswIndex> index(new HnswIndex());
  const size_t n = rows.size() / dim;
  index->impl_->create(n, dim, p);
  Hnsw& h = *index->impl_->hnsw;
  for (size_t i = 0; i < n; ++i) {
    h.addPoint(rows.data() + i * dim, hnswlib::labeltype(i));
    if (progress && ((i + 1) % 256 == 0 || i + 1 == n)) progress(i + 1, n);
  }
  return index;
}

uint64_t HnswIndex::save(const std::filesystem::path& path) const {
  const Hnsw& h = *impl_->hnsw;
  const size_t n = impl_->n;
  std::string body;
  append_pod(body, uint32_t(impl_->dim));
  append_pod(body, uint32_t(0));
  append_pod(body, uint64_t(n));
  append_pod(body, uint64_t(h.M_));
  append_pod(body, uint64_t(h.maxM0_));
  append_pod(body, uint64_t(h.ef_construction_));
  append_pod(body, uint64_t(impl_->params.seed));
  append_pod(body, int32_t(h.maxlevel_));
  append_pod(body, uint32_t(h.enterpoint_node_));
  append_pod(body, rows_checksum(h, n, impl_->dim));
  for (size_t i = 0; i < n; ++i) {
    const int level = h.element_levels_[i];
    append_pod(body, uint32_t(level));
    for (int l = 0; l <= level; ++l) {
      hnswlib::linklistsizeint* ll = h.get_linklist_at_level(tableint(i), l);
      const uint32_t count = h.getListCount(ll);
      append_pod(body, count);
      body.append(reinterpret_cast<const char*>(ll + 1), count * sizeof(tableint));
    }
  }
  return write_checked_file(path, kMagic, kVersion, {body});
}

std::unique_ptr<HnswIndex> HnswIndex::load(const std::filesystem::path& path, std::span<const float> rows,
                                           size_t dim, size_t ef_search) {
  const CheckedFile file = read_checked_file(path, kMagic, kVersion);
  ByteReader r(path.string(), file.body());
  const auto f_dim = r.pod<uint32_t>("dim");
  r.pod<uint32_t>("reserved");
  const auto n = r.pod<uint64_t>("node count");
  HnswParams p;
  p.M = r.pod<uint64_t>("M");
  const auto max_m0 = r.pod<uint64_t>("max_m0");
  p.ef_construction = r.pod<uint64_t>("ef_construction");
  p.seed = r.pod<uint64_t>("seed");
  p.ef_search = ef_search;
  const auto max_level = r.pod<int32_t>("max_level");
  const auto entry = r.pod<uint32_t>("entry point");
  const auto rows_sum = r.pod<uint64_t>("rows checksum");

  const std::string name = path.string();
  if (f_dim != dim) fail("{}: graph of {}-dimensional vectors, the embeddings have {}", name, f_dim, dim);
  if (dim == 0 || rows.size() != n * dim)
    fail("{}: graph of {} nodes, the embeddings hold {} rows", name, n, dim ? rows.size() / dim : 0);
  if (p.M < 2 || p.M > 10000) fail("{}: corrupt: M {} (at least 2, at most 10000)", name, p.M);  // (found by fuzzing)
  if (max_m0 != 2 * p.M) fail("{}: corrupt: max_m0 {} for M {}", name, max_m0, p.M);
  if (max_level < 0 || max_level > kMaxLevel) fail("{}: corrupt: max level {}", name, max_level);
  if (entry >= n) fail("{}: corrupt: entry point {} of {} nodes", name, entry, n);
  if (rows_sum != checksum64(rows.data(), rows.size_bytes()))
    fail("{}: the graph was built over other vectors than the embeddings given (checksum mismatch)", name);

  std::unique_ptr<HnswIndex> index(new HnswIndex());
  index->impl_->create(n, dim, p);
  Hnsw& h = *index->impl_->hnsw;
  if (h.maxM0_ != max_m0 || h.offsetLevel0_ != 0) fail("{}: graph layout does not match this hnswlib", name);

  auto read_links = [&](hnswlib::linklistsizeint* ll, size_t max_count, size_t i, int l) {
    const auto count = r.pod<uint32_t>("link count");
    if (count > max_count)
      fail("{}: corrupt: node {} level {} has {} links, at most {}", name, i, l, count, max_count);
    const std::string_view ids = r.bytes(count * sizeof(tableint), "links");
    std::memcpy(ll + 1, ids.data(), ids.size());
    for (uint32_t j = 0; j < count; ++j)
      if (reinterpret_cast<const tableint*>(ll + 1)[j] >= n)
        fail("{}: corrupt: node {} level {} links to node {} of {}", name, i, l,
             reinterpret_cast<const tableint*>(ll + 1)[j], n);
    h.setListCount(ll, static_cast<unsigned short>(count));
  };
  for (size_t i = 0; i < n; ++i) {
    const auto level = r.pod<uint32_t>("node level");
    if (level > uint32_t(max_level))
      fail("{}: corrupt: node {} at level {} above the max level {}", name, i, level, max_level);
    hnswlib::linklistsizeint* ll0 = h.get_linklist0(tableint(i));
    std::memset(ll0, 0, h.size_links_level0_);  // count 0, not deleted
    std::memcpy(h.getDataByInternalId(tableint(i)), rows.data() + i * dim, dim * sizeof(float));
    h.setExternalLabel(tableint(i), hnswlib::labeltype(i));
    h.label_lookup_[hnswlib::labeltype(i)] = tableint(i);
    h.linkLists_[i] = nullptr;
    if (level > 0) {
      h.linkLists_[i] = static_cast<char*>(std::calloc(level, h.size_links_per_element_));
      if (!h.linkLists_[i]) fail("{}: out of memory for the links of node {}", name, i);
    }
    h.element_levels_[i] = int(level);
    h.cur_element_count = i + 1;  // from here the node's memory is hnswlib's to free
    read_links(ll0, h.maxM0_, i, 0);
    for (uint32_t l = 1; l <= level; ++l) read_links(h.get_linklist(tableint(i), int(l)), h.maxM_, i, int(l));
  }
  r.expect_end();
  // A link on level l must lead to a node that exists on level l, or a search reads past its lists.
  for (size_t i = 0; i < n; ++i)
    for (int l = 1; l <= h.element_levels_[i]; ++l) {
      hnswlib::linklistsizeint* ll = h.get_linklist(tableint(i), l);
      const auto* ids = reinterpret_cast<const tableint*>(ll + 1);
      for (unsigned j = 0; j < h.getListCount(ll); ++j)
        if (h.element_levels_[ids[j]] < l)
          fail("{}: corrupt: node {} links on level {} to node {} of level {}", name, i, l, ids[j],
               h.element_levels_[ids[j]]);
    }
  if (h.element_levels_[entry] != max_level)
    fail("{}: corrupt: entry point {} is on level {}, not the max level {}", name, entry, h.element_levels_[entry],
         max_level);
  h.maxlevel_ = max_level;
  h.enterpoint_node_ = entry;
  return index;
}

std::vector<Hit> HnswIndex::search(std::span<const float> query, size_t k) const {
  check_query_dim(query, impl_->dim);
  k = std::min(k, impl_->n);
  if (k == 0) return {};
  auto result = impl_->hnsw->searchKnn(query.data(), k);  // max-heap on (distance, label)
  std::vector<Hit> hits(result.size());
  for (size_t i = hits.size(); i-- > 0; result.pop())
    hits[i] = Hit{uint32_t(result.top().second), 1.0f - result.top().first};
  return hits;
}

// ---- Staged search (RAGCache §5.3 "pipelined vector search") --------------------------------
//
// The statements below mirror HierarchicalNSW::searchKnn and searchBaseLayerST (hnswlib 0.6.2)
// one for one, with the two loops turned into resumable states: the same distance function,
// the same heaps with the same comparator and the same push/pop sequence, hence the same result.

struct StagedSearch::State {
  enum class Phase { start, descend, base_start, base, finished };

  const Hnsw* h = nullptr;
  std::vector<float> query;  // f32 [dim], a copy: the caller's buffer may go away
  size_t k = 0, ef = 0;
  Phase phase = Phase::start;
  size_t work = 0;           // distance computations so far
  std::vector<Hit> current;  // top-k after the last step

  // Upper-level descent (searchKnn): greedy moves to the closest neighbour, level by level.
  int level = 0;
  tableint cur_obj = 0;
  float cur_dist = 0;
  bool changed = true;

  // The link list being scanned, in either phase (nullptr: none).
  const tableint* list = nullptr;
  size_t list_size = 0, list_pos = 0;

  // Level 0 (searchBaseLayerST): visited marks, ef best found (max-heap on distance), and the
  // candidates to expand (max-heap on -distance).
  hnswlib::VisitedList* visited = nullptr;
  TopHeap top, candidates;
  float lower_bound = std::numeric_limits<float>::max();
  bool has_deletions = false;

  ~State() {
    if (visited) h->visited_list_pool_->releaseVisitedList(visited);
  }
  float dist(tableint id) {
    ++work;
    return h->fstdistfunc_(query.data(), h->getDataByInternalId(id), h->dist_func_param_);
  }
  void start_list(hnswlib::linklistsizeint* ll) {
    list_size = h->getListCount(ll);
    list = reinterpret_cast<const tableint*>(ll + 1);
    list_pos = 0;
  }
  void settle();       // bookkeeping up to the next distance computation (or the end)
  void compute_one();  // exactly one distance computation and its consequences
  void update_current() {
    if (phase == Phase::base || phase == Phase::finished)
      current = top_k_of(top, k);
    else
      current = {Hit{uint32_t(h->getExternalLabel(cur_obj)), 1.0f - cur_dist}};
  }
};

// Bookkeeping up to the next distance computation: pass levels and lists that are done, pick
// the next candidate to expand, skip visited neighbours, or finish.
void StagedSearch::State::settle() {
  for (;;) {
    switch (phase) {
      case Phase::start:
      case Phase::base_start:
      case Phase::finished:
        return;

      case Phase::descend:
        if (level <= 0) {
          phase = Phase::base_start;
          continue;
        }
        if (!list) {  // `while (changed)`: rescan the current node's list until nothing improves
          if (!changed) {
            --level;
            changed = true;
            continue;
          }
          changed = false;
          start_list(h->get_linklist(cur_obj, level));
        }
        if (list_pos < list_size) return;
        list = nullptr;
        continue;

      case Phase::base:
        if (!list) {  // expand the closest candidate, or stop when it cannot improve the top ef
          if (candidates.empty()) {
            phase = Phase::finished;
            return;
          }
          const DistId c = candidates.top();
          if (-c.first > lower_bound && (top.size() == ef || !has_deletions)) {
            phase = Phase::finished;
            return;
          }
          candidates.pop();
          start_list(h->get_linklist0(c.second));
        }
        while (list_pos < list_size && visited->mass[list[list_pos]] == visited->curV) ++list_pos;
        if (list_pos < list_size) return;
        list = nullptr;
        continue;
    }
  }
}

// One distance computation and what follows from it; settle() must have run before.
void StagedSearch::State::compute_one() {
  switch (phase) {
    case Phase::start:
      cur_obj = h->enterpoint_node_;
      cur_dist = dist(cur_obj);
      level = h->maxlevel_;
      changed = true;
      phase = Phase::descend;
      return;

    case Phase::descend: {
      const tableint cand = list[list_pos++];
      const float d = dist(cand);
      if (d < cur_dist) {
        cur_dist = d;
        cur_obj = cand;
        changed = true;
      }
      return;
    }

    case Phase::base_start: {  // searchBaseLayerST from cur_obj (it computes that distance again)
      has_deletions = h->num_deleted_ > 0;
      visited = h->visited_list_pool_->getFreeVisitedList();
      const float d = dist(cur_obj);
      if (!has_deletions || !h->isMarkedDeleted(cur_obj)) {
        lower_bound = d;
        top.emplace(d, cur_obj);
        candidates.emplace(-d, cur_obj);
      } else {
        lower_bound = std::numeric_limits<float>::max();
        candidates.emplace(-lower_bound, cur_obj);
      }
      visited->mass[cur_obj] = visited->curV;
      list = nullptr;
      phase = Phase::base;
      return;
    }

    case Phase::base: {
      const tableint id = list[list_pos++];
      visited->mass[id] = visited->curV;
      const float d = dist(id);
      if (top.size() < ef || lower_bound > d) {
        candidates.emplace(-d, id);
        if (!has_deletions || !h->isMarkedDeleted(id)) top.emplace(d, id);
        if (top.size() > ef) top.pop();
        if (!top.empty()) lower_bound = top.top().first;
      }
      return;
    }

    case Phase::finished:
      return;
  }
}

StagedSearch::StagedSearch(std::unique_ptr<State> s) : s_(std::move(s)) {}
StagedSearch::StagedSearch(StagedSearch&&) noexcept = default;
StagedSearch& StagedSearch::operator=(StagedSearch&&) noexcept = default;
StagedSearch::~StagedSearch() = default;

const std::vector<Hit>& StagedSearch::step(size_t budget) {
  if (budget == 0) fail("staged search: a step needs a budget of at least one distance computation");
  State& s = *s_;
  const size_t limit = s.work + budget;
  s.settle();
  while (s.phase != State::Phase::finished && s.work < limit) {
    s.compute_one();
    s.settle();  // so that a search whose last distance is computed ends in this step
  }
  if (s.phase == State::Phase::finished && s.visited) {
    s.h->visited_list_pool_->releaseVisitedList(s.visited);
    s.visited = nullptr;
  }
  s.update_current();
  return s.current;
}

bool StagedSearch::done() const { return s_->phase == State::Phase::finished; }
const std::vector<Hit>& StagedSearch::current() const { return s_->current; }
size_t StagedSearch::work() const { return s_->work; }

StagedSearch HnswIndex::staged_search(std::span<const float> query, size_t k) const {
  check_query_dim(query, impl_->dim);
  auto s = std::make_unique<StagedSearch::State>();
  s->h = impl_->hnsw.get();
  s->query.assign(query.begin(), query.end());
  s->k = std::min(k, impl_->n);
  s->ef = std::max(s->h->ef_, s->k);
  if (s->k == 0) s->phase = StagedSearch::State::Phase::finished;
  return StagedSearch(std::move(s));
}

}  // namespace ragkv
