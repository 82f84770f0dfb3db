// Speculative pipelined search (RAGCache §5.3, Algorithm 2 with one worker):
// the longest-common-prefix bookkeeping on hand-made snapshot sequences, a staged HNSW search
// whose reported snapshots end on the final top-k (and so does the speculation fed by them), and
// the prefetcher's loads, drops and wasted bytes on a small store. No model needed.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/kv/kv-prefetch.h"
#include "core/kv/kv-store.h"
#include "core/rag/speculation.h"
#include "retrieval/hnsw-index.h"
#include "retrieval/staged-metrics.h"
#include "tests/test-tempdir.h"

namespace {

using ragkv::SpeculativeLoads;
using Items = std::vector<std::string>;

std::vector<float> unit_rows(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(n * dim);
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t j = 0; j < dim; ++j) s += double(v[i * dim + j] = g(rng)) * v[i * dim + j];
    for (size_t j = 0; j < dim; ++j) v[i * dim + j] = float(v[i * dim + j] / std::sqrt(s));
  }
  return v;
}

}  // namespace

TEST_CASE("speculation: a changed mind keeps the common prefix, terminates the rest and counts the waste") {
  // RAGCache Fig. 13: stages give [D1, D3], [D1, D2], [D1, D2], then the final [D1, D2].
  SpeculativeLoads s;
  auto c = s.update({"D1", "D3"});
  CHECK(c.kept == 0);
  CHECK(c.start == std::vector<size_t>{0, 1});
  CHECK(c.stop.empty());
  c = s.update({"D1", "D2"});
  CHECK(c.kept == 1);  // D1's load goes on
  CHECK(c.start == std::vector<size_t>{1});
  CHECK(c.stop == Items{"D3"});
  c = s.update({"D1", "D2"});  // the same candidates: nothing restarts
  CHECK(c.kept == 2);
  CHECK(c.start.empty());
  CHECK(c.stop.empty());
  c = s.finish({"D1", "D2"});
  CHECK(c.start.empty());
  CHECK(s.current() == Items{"D1", "D2"});
  CHECK(s.speculations() == 2);
  CHECK(s.restarts() == 1);
  CHECK(s.started() == 3);
  CHECK(s.wasted() == Items{"D3"});
}

TEST_CASE("speculation: a changed first chunk restarts everything, and the final top-k always wins") {
  SpeculativeLoads s;
  s.update({"@/A", "@/A/B", "@/A/B/C"});
  auto c = s.update({"@/A", "@/A/C", "@/A/C/B"});
  CHECK(c.kept == 1);
  CHECK(c.stop == Items{"@/A/B", "@/A/B/C"});
  c = s.update({"@/A", "@/A/B", "@/A/B/C"});  // back again: started anew, but counted once
  CHECK(c.kept == 1);
  CHECK(c.start == std::vector<size_t>{1, 2});
  CHECK(c.stop == Items{"@/A/C", "@/A/C/B"});
  c = s.finish({"@/D", "@/D/A"});  // the final result differs from every snapshot
  CHECK(c.kept == 0);
  CHECK(c.start == std::vector<size_t>{0, 1});
  CHECK(c.stop == Items{"@/A", "@/A/B", "@/A/B/C"});
  CHECK(s.current() == Items{"@/D", "@/D/A"});
  CHECK(s.started() == 7);
  CHECK(s.restarts() == 3);
  CHECK(s.wasted() == Items{"@/A", "@/A/B", "@/A/B/C", "@/A/C", "@/A/C/B"});
  SpeculativeLoads none;  // a search whose first complete top-k is the final one wastes nothing
  none.update({"X", "Y"});
  none.finish({"X", "Y"});
  CHECK(none.wasted().empty());
  CHECK(none.speculations() == 1);
}

TEST_CASE("speculation: a staged HNSW search reports complete top-ks and ends on the final top-k") {
  const size_t n = 800, dim = 24, k = 5;
  const auto rows = unit_rows(n, dim, 7);
  const auto queries = unit_rows(40, dim, 8);
  ragkv::HnswParams hp;
  hp.ef_search = 16;  // a short candidate list: the top-k changes during the search
  const auto index = ragkv::HnswIndex::build(rows, dim, hp);
  size_t changed_minds = 0;
  for (size_t slice : {size_t(1), size_t(7), size_t(64)}) {
    for (size_t qi = 0; qi < 40; ++qi) {
      const std::span<const float> q(queries.data() + qi * dim, dim);
      const auto want = index->search(q, k);
      ragkv::StagedSearch staged = index->staged_search(q, k);
      std::vector<std::vector<ragkv::Hit>> reported;
      SpeculativeLoads spec;
      const auto got = ragkv::run_staged_search(staged, slice, k, [&](const std::vector<ragkv::Hit>& top) {
        reported.push_back(top);
        Items items;
        for (const auto& h : top) items.push_back(std::to_string(h.chunk));
        spec.update(items);
      });
      CHECK(got == want);
      REQUIRE(!reported.empty());
      CHECK(reported.back() == want);  // the final top-k is reported last
      for (size_t i = 0; i < reported.size(); ++i) {
        CHECK(reported[i].size() == k);  // only complete top-ks are speculated on
        if (i > 0) CHECK(reported[i] != reported[i - 1]);  // only changes
      }
      Items final_items;
      for (const auto& h : want) final_items.push_back(std::to_string(h.chunk));
      CHECK(spec.current() == final_items);  // speculation never changes the chunks used
      changed_minds += spec.restarts();
    }
  }
  CHECK(changed_minds > 0);  // the sequences did change their minds (the test is not vacuous)
}

TEST_CASE("speculation: the prefetcher loads wanted caches, skips missing ones and counts dropped work as waste") {
  namespace fs = std::filesystem;
  ragkv::test::TempDir tmp("speculation");
  ragkv::KvStoreInfo info;
  info.model_fingerprint = "model-a";
  info.model_name = "model-a.gguf";
  info.n_layer = 3;
  info.n_kv_head = 2;
  info.head_dim = 4;
  info.prefix = "canonical:0123456789abcdef";
  const ragkv::KvStore store = ragkv::KvStore::open_for_write(tmp.path / "store", info);
  auto meta = [&](const std::string& id) {
    ragkv::ChunkKvMeta m;
    m.model_fingerprint = info.model_fingerprint;
    m.chunk_id = id;
    m.prefix = info.prefix;
    m.n_layer = 3;
    m.n_kv_head = 2;
    m.head_dim = 4;
    m.n_tokens = 6;
    m.token_hash = ragkv::token_ids_hash(std::vector<int32_t>{1, 2, 3, 4, 5, 6});
    m.first_pos = 10;
    return m;
  };
  std::vector<uint16_t> data(6 * 8, 0x3c00);  // f16 1.0
  std::vector<const uint16_t*> layers(3, data.data());
  store.put(meta("A"), layers, layers);
  store.put(meta("B"), layers, layers);
  const uint64_t chunk_bytes = 3 * 2 * 6 * 8 * 2;  // layers × (K, V) × tokens × kv_dim × f16

  ragkv::KvPrefetcher pf(store);
  pf.want("@/A", {meta("A")});
  pf.want("@/A/C", {meta("C"), meta("B")});  // no file for the chain node: the canonical cache
  pf.want("@/Z", {meta("Z")});               // nothing stored: the prompt computes it
  pf.want("@/A", {meta("A")});               // already wanted: not asked again
  pf.wait_idle();
  auto st = pf.stats();
  CHECK(st.wanted == 3);
  CHECK(st.completed == 2);
  CHECK(st.missing == 1);
  CHECK(st.bytes_read == 2 * chunk_bytes);
  CHECK(st.wasted_bytes == 0);
  pf.unwant("@/A/C");  // loaded, then no longer wanted: wasted
  pf.unwant("@/A/C");  // once
  pf.unwant("@/never");
  st = pf.stats();
  CHECK(st.stopped == 1);
  CHECK(st.wasted_loads == 1);
  CHECK(st.wasted_bytes == chunk_bytes);
  pf.want("@/A/C", {meta("B")});  // wanted again: loaded again
  pf.wait_idle();
  CHECK(pf.stats().completed == 3);
  CHECK(pf.stats().bytes_read == 3 * chunk_bytes);
}
