// `store gc`: the removal order — files that cannot serve, variants by lowest f_r (Cache-Craft
// §3.3), knowledge-tree chain nodes least recently used, canonical caches least recently used, the
// prefix last — a budget never exceeded at any size, canonical caches only when allowed (else
// nothing removed and the result says so), a claimed file never removed, a dry run that removes
// nothing, and variant-usage.json pruned of what went.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/kv/claim-set.h"
#include "core/kv/kv-store.h"
#include "core/kv/store-gc.h"
#include "core/kv/store-lock.h"
#include "core/kv/variant-ledger.h"
#include "core/util/file-io.h"
#include "tests/test-tempdir.h"

namespace {

namespace fs = std::filesystem;
using ragkv::ChunkKvMeta;
using ragkv::GcKind;
using ragkv::KvStore;
using ragkv::test::TempDir;

ragkv::KvStoreInfo info() {
  ragkv::KvStoreInfo i;
  i.model_fingerprint = "model-a";
  i.model_name = "a.gguf";
  i.n_layer = 2;
  i.n_kv_head = 2;
  i.head_dim = 4;
  i.prefix = "canonical:0";
  return i;
}

ChunkKvMeta meta(const std::string& id, std::vector<std::string> context = {}, bool chain = false) {
  ChunkKvMeta m;
  m.model_fingerprint = "model-a";
  m.chunk_id = id;
  m.prefix = info().prefix;
  m.n_layer = 2;
  m.n_kv_head = 2;
  m.head_dim = 4;
  m.n_tokens = 5;
  const std::vector<int32_t> ids{1, 2, 3, 4, 5};
  m.token_hash = ragkv::token_ids_hash(ids);
  m.context = std::move(context);
  m.exact_chain = chain;
  return m;
}

// Last used (atime) and written (mtime) `age` seconds ago.
void set_times(const fs::path& p, int age) {
  timespec t[2];
  ::clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= age;
  t[1] = t[0];
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), t, 0) == 0);
}

// A store of every kind of file, each with a known age and f_r. Names in removal order.
struct GcStore {
  TempDir tmp{"store-gc"};
  fs::path dir = tmp.path / "store";
  KvStore store = KvStore::open_for_write(dir, info());
  std::vector<std::string> order;  // expected removal order (file names)

  fs::path put(const ChunkKvMeta& m, int age) {
    std::vector<uint16_t> data(size_t(m.n_tokens) * m.kv_dim(), 0x3c00);
    const std::vector<const uint16_t*> k(m.n_layer, data.data()), v(m.n_layer, data.data());
    ragkv::VariantStats stats;
    stats.inter.assign(m.context.size(), 0.1f);
    store.put(m, k, v, m.context.empty() || m.exact_chain ? nullptr : &stats);
    const fs::path p = store.chunk_path(m);
    set_times(p, age);
    return p;
  }

  GcStore() {
    // A file of another model (cannot serve): first, whatever its age.
    const fs::path foreign = dir / "kv" / "00000000000000aa.rkv";
    ChunkKvMeta f = meta("x");
    f.model_fingerprint = "model-b";
    std::vector<uint16_t> data(40, 0);
    ragkv::write_chunk_kv(foreign, f, std::vector<const uint16_t*>(2, data.data()),
                          std::vector<const uint16_t*>(2, data.data()));
    order.push_back(foreign.filename().string());
    // Variants: f_r 0 (never used) before 1/0.5 = 2 before 1/0.1 = 10, whatever their age.
    const fs::path v_hot = put(meta("c1", {"c2"}), 900), v_warm = put(meta("c1", {"c3"}), 10),
                   v_cold = put(meta("c2", {"c1"}), 5);
    {
      ragkv::VariantLedger ledger(store);
      ledger.record_use(v_hot.filename().string(), 0.1);
      ledger.record_use(v_warm.filename().string(), 0.5);
    }
    for (const fs::path& p : {v_cold, v_warm, v_hot}) order.push_back(p.filename().string());
    // Chain nodes: least recently used first.
    const fs::path ch_old = put(meta("c2", {"c1"}, true), 500), ch_new = put(meta("c3", {"c1"}, true), 50);
    for (const fs::path& p : {ch_old, ch_new}) order.push_back(p.filename().string());
    // Canonical caches, least recently used first; the prefix last though it is the oldest.
    const fs::path c_old = put(meta("c1"), 800), c_mid = put(meta("c2"), 300), c_new = put(meta("c3"), 1),
                   prefix = put(meta(ragkv::kPrefixChunkId), 5000);
    for (const fs::path& p : {c_old, c_mid, c_new, prefix}) order.push_back(p.filename().string());
  }

  uint64_t bytes() const { return store.usage().second; }
  uint64_t bytes_of(const std::string& name) const { return fs::file_size(dir / "kv" / name); }
};

}  // namespace

TEST_CASE("store gc: the removal order is bad files, variants by f_r, chain nodes by last use, canonical caches, prefix") {
  GcStore g;
  std::vector<std::string> names;
  std::vector<GcKind> kinds;
  {
    const ragkv::StoreLock lock(g.dir);
    for (const auto& c : ragkv::gc_order(g.store)) {
      names.push_back(c.name);
      kinds.push_back(c.kind);
    }
  }
  CHECK(names == g.order);
  CHECK(kinds == std::vector<GcKind>{GcKind::bad, GcKind::variant, GcKind::variant, GcKind::variant, GcKind::chain,
                                     GcKind::chain, GcKind::canonical, GcKind::canonical, GcKind::canonical,
                                     GcKind::prefix});
}

TEST_CASE("store gc: at every budget the store ends at or under it, removing a prefix of the order") {
  uint64_t total = 0;
  { total = GcStore().bytes(); }
  for (uint64_t budget = 0; budget <= total + 100; budget += total / 17 + 1) {
    INFO("budget " << budget);
    GcStore g;
    const auto r = ragkv::collect_garbage(g.store, {budget, /*include_canonical=*/true, false, std::nullopt});
    CHECK(r.bytes_before == total);
    CHECK(r.budget_met);
    CHECK(r.bytes_after <= budget);
    CHECK(g.bytes() == r.bytes_after);
    REQUIRE(r.removed.size() <= g.order.size());
    for (size_t i = 0; i < r.removed.size(); ++i) {
      CHECK(r.removed[i].name == g.order[i]);
      CHECK_FALSE(fs::exists(g.dir / "kv" / g.order[i]));
    }
    for (size_t i = r.removed.size(); i < g.order.size(); ++i) CHECK(fs::exists(g.dir / "kv" / g.order[i]));
    // Nothing more than needed: the last file removed was needed to get under the budget.
    if (!r.removed.empty()) CHECK(r.bytes_after + r.removed.back().bytes > budget);
  }
}

TEST_CASE("store gc: canonical caches only with include_canonical, claimed files never, dry run nothing") {
  GcStore g;
  uint64_t non_canonical = 0;
  for (size_t i = 0; i < 6; ++i) non_canonical += g.bytes_of(g.order[i]);
  const uint64_t total = g.bytes(), floor = total - non_canonical;

  SUBCASE("a budget variants meet: only variants go, their f_r forgotten") {
    const uint64_t budget = total - g.bytes_of(g.order[0]) - g.bytes_of(g.order[1]);
    const auto r = ragkv::collect_garbage(g.store, {budget, false, false, std::nullopt});
    CHECK(r.budget_met);
    REQUIRE(r.removed.size() == 2);
    CHECK(r.removed[1].kind == GcKind::variant);
    const std::string usage = ragkv::read_file(g.dir / "variant-usage.json");
    CHECK(usage.find(g.order[2]) != std::string::npos);  // still there
    CHECK(usage.find(g.order[1]) == std::string::npos);  // never used: not in the file anyway
    const auto r2 = ragkv::collect_garbage(g.store, {total - non_canonical + g.bytes_of(g.order[5]), false, false, std::nullopt});
    CHECK(r2.budget_met);
    CHECK(ragkv::read_file(g.dir / "variant-usage.json").find(g.order[2]) == std::string::npos);  // removed: forgotten
  }
  SUBCASE("below what canonical caches alone hold: nothing removed without the flag") {
    const auto r = ragkv::collect_garbage(g.store, {floor - 1, false, false, std::nullopt});
    CHECK(r.needs_canonical);
    CHECK_FALSE(r.budget_met);
    CHECK(r.removed.empty());
    CHECK(r.bytes_without_canonical == floor);
    CHECK(g.bytes() == total);
    const auto with = ragkv::collect_garbage(g.store, {floor - 1, true, false, std::nullopt});
    CHECK(with.budget_met);
    CHECK(with.removed.size() == 7);  // the six others and the least recently used canonical cache
    CHECK(with.removed.back().name == g.order[6]);
  }
  SUBCASE("a file another live worker claims is kept, the next in line goes instead") {
    ragkv::ClaimSet other(60);
    REQUIRE(other.try_claim(g.dir / "kv" / g.order[1]) == ragkv::ClaimSet::Result::acquired);
    const uint64_t budget = total - g.bytes_of(g.order[0]) - g.bytes_of(g.order[1]);
    const auto r = ragkv::collect_garbage(g.store, {budget, false, false, std::nullopt});
    CHECK(r.budget_met);
    CHECK(fs::exists(g.dir / "kv" / g.order[1]));
    CHECK(r.kept_claimed == std::vector<std::string>{g.order[1]});
    REQUIRE(r.removed.size() >= 2);
    CHECK(r.removed[1].name == g.order[2]);
    CHECK(r.bytes_without_canonical == floor + g.bytes_of(g.order[1]));
  }
  SUBCASE("dry run: the same decision, nothing removed") {
    const auto dry = ragkv::collect_garbage(g.store, {floor, false, true, std::nullopt});
    CHECK(dry.budget_met);
    CHECK(dry.removed.size() == 6);
    CHECK(g.bytes() == total);
    const auto real = ragkv::collect_garbage(g.store, {floor, false, false, std::nullopt});
    CHECK(real.removed.size() == 6);
    CHECK(g.bytes() == floor);
  }
}
