// The knowledge tree's decisions (core/kv/knowledge-tree.h) on synthetic traces, without a model:
// PGDSF, GDSF and LRU victims worked by hand from RAGCache's Formulas 2–4, swap-out-only-once,
// leaf-first and multi-level eviction, budgets that are never exceeded on random traces, prefix
// matching; and the prefill cost model (bilinear interpolation, the online fit).
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/kv/cache-policy.h"
#include "core/kv/knowledge-tree.h"

namespace {

using namespace ragkv;
using Path = std::vector<std::string>;

// Records every copy and release, and holds the set of (node, tier) copies that exist.
struct LogMover : KnowledgeTree::Mover {
  std::vector<std::string> log;
  std::set<std::pair<int, int>> held;
  const KnowledgeTree* tree = nullptr;
  static std::string tier(std::optional<KvTier> t) { return t ? kv_tier_name(*t) : "prompt"; }
  bool copy(int n, std::optional<KvTier> from, KvTier to) override {
    log.push_back(tree->node(n).id + " " + tier(from) + ">" + tier(to));
    held.insert({n, int(to)});
    return true;
  }
  void release(int n, KvTier t) override {
    log.push_back(tree->node(n).id + " free " + tier(t));
    held.erase({n, int(t)});
  }
};

TierBudgets budgets(uint64_t device, uint64_t host, uint64_t disk) {
  TierBudgets b;
  b.bytes = {device, host, disk};
  return b;
}

// One request using the nodes at `paths` in order: computed (from = nullopt) or served from a
// tier, each at `cost` per token; every node 100 tokens and 100 bytes.
void use(KnowledgeTree& t, const std::vector<Path>& paths, std::optional<KvTier> from, double cost) {
  std::vector<NodeUse> uses;
  for (const Path& p : paths) uses.push_back({t.add(p, 100, 100), from, cost});
  t.record_request(uses);
}
void computed(KnowledgeTree& t, const std::string& id, double cost) { use(t, {{id}}, std::nullopt, cost); }

bool held(const KnowledgeTree& t, const Path& p, KvTier tier) {
  const int n = t.find(p);
  return n >= 0 && t.node(n).live && t.node(n).in[size_t(tier)];
}
double priority(const KnowledgeTree& t, const Path& p, KvTier tier) {
  return t.node(t.find(p)).priority[size_t(tier)];
}

}  // namespace

TEST_CASE("knowledge tree: PGDSF evicts by Clock + Frequency x Cost/Size, the clock rising to each victim (Formulas 2-4)") {
  KnowledgeTree t(CachePolicy::pgdsf, budgets(0, 300, 0));  // host memory only: room for three nodes
  computed(t, "A", 5);  // priority 0 + 1 x 5 = 5
  computed(t, "B", 1);  // 1
  computed(t, "C", 2);  // 2
  computed(t, "D", 3);  // full: B (1) goes, Clock = 1; D = 1 + 1 x 3 = 4
  CHECK_FALSE(held(t, {"B"}, KvTier::host));
  CHECK(t.stats(KvTier::host).clock == doctest::Approx(1.0));
  CHECK(priority(t, {"D"}, KvTier::host) == doctest::Approx(4.0));
  computed(t, "B", 1);  // B anew (its frequency went with it): C (2) goes, Clock = 2; B = 2 + 1 = 3
  CHECK_FALSE(held(t, {"C"}, KvTier::host));
  CHECK(priority(t, {"B"}, KvTier::host) == doctest::Approx(3.0));
  use(t, {{"A"}}, KvTier::host, 0);  // a hit: frequency 2, Cost/Size stays 5 (no miss): 2 + 2 x 5 = 12
  CHECK(priority(t, {"A"}, KvTier::host) == doctest::Approx(12.0));
  computed(t, "E", 1);  // B (3) < D (4) < A (12): B goes, Clock = 3
  CHECK_FALSE(held(t, {"B"}, KvTier::host));
  CHECK(held(t, {"A"}, KvTier::host));
  CHECK(held(t, {"D"}, KvTier::host));
  CHECK(held(t, {"E"}, KvTier::host));
  CHECK(t.stats(KvTier::host).clock == doctest::Approx(3.0));
  CHECK(t.stats(KvTier::host).evicted == 3);

  // Formula 4: Cost/Size is the mean over the misses; a disk read counts as a miss, a hit does not.
  use(t, {{"E"}}, KvTier::disk, 3);  // E: misses cost 1 and 3: mean 2; frequency 2: 3 + 2 x 2 = 7
  CHECK(priority(t, {"E"}, KvTier::host) == doctest::Approx(7.0));
}

TEST_CASE("knowledge tree: GDSF ignores the cost and LRU the frequency") {
  KnowledgeTree g(CachePolicy::gdsf, budgets(0, 300, 0));
  computed(g, "A", 5);
  computed(g, "B", 1);
  computed(g, "C", 2);
  computed(g, "D", 3);  // all priorities 1 (Cost/Size = 1): the least recently used, A, goes
  CHECK_FALSE(held(g, {"A"}, KvTier::host));
  CHECK(held(g, {"B"}, KvTier::host));

  KnowledgeTree l(CachePolicy::lru, budgets(0, 300, 0));
  computed(l, "A", 5);
  computed(l, "B", 1);
  computed(l, "C", 2);
  use(l, {{"A"}}, KvTier::host, 0);
  use(l, {{"A"}}, KvTier::host, 0);  // A used thrice, but B is the least recent
  computed(l, "D", 3);
  CHECK_FALSE(held(l, {"B"}, KvTier::host));
  computed(l, "E", 3);  // then C
  CHECK_FALSE(held(l, {"C"}, KvTier::host));
  CHECK(held(l, {"A"}, KvTier::host));
}

TEST_CASE("knowledge tree: a node is swapped out to host memory only once (RAGCache swap-out-only-once)") {
  KnowledgeTree t(CachePolicy::pgdsf, budgets(100, 1000, 0));  // device memory holds one node
  LogMover m;
  m.tree = &t;
  t.set_mover(&m);
  computed(t, "A", 1);
  computed(t, "B", 1);                  // A swapped out to host, B in device
  use(t, {{"A"}}, KvTier::host, 0);     // A up again (its host copy stays); B swapped out
  use(t, {{"B"}}, KvTier::host, 0);     // B up; A evicted from device: host has it, no copy
  CHECK(m.log == std::vector<std::string>{"A prompt>device",                                     // A computed
                                          "A device>host", "A free device", "B prompt>device",     // B computed
                                          "B device>host", "B free device", "A host>device",       // A used
                                          "A free device", "B host>device"});                      // B used
  CHECK(t.stats(KvTier::device).swapped_out == 2);
  CHECK(t.stats(KvTier::host).placed == 2);
  CHECK(held(t, {"A"}, KvTier::host));
  CHECK(held(t, {"B"}, KvTier::host));
  CHECK(held(t, {"B"}, KvTier::device));
}

TEST_CASE("knowledge tree: eviction takes leaves of the tier, parents stay above children") {
  KnowledgeTree t(CachePolicy::pgdsf, budgets(200, 1000, 0));
  // R then R/X in one request: R is cheap (priority 0.1), X dear (10); S needs room.
  std::vector<NodeUse> uses{{t.add(Path{"R"}, 100, 100), std::nullopt, 0.1},
                            {t.add(Path{"R", "X"}, 100, 100), std::nullopt, 10}};
  t.record_request(uses);
  computed(t, "S", 1);
  CHECK(held(t, {"R"}, KvTier::device));  // not a leaf in device memory while X is there
  CHECK_FALSE(held(t, {"R", "X"}, KvTier::device));
  CHECK(held(t, {"R", "X"}, KvTier::host));  // swapped out
  CHECK(t.match(Path{"R", "X", "Y"}).size() == 2);
  CHECK(t.cached_tokens(Path{"R", "X", "Y"}) == 200);
  CHECK(t.match(Path{"Q", "X"}).empty());
}

TEST_CASE("knowledge tree: multi-level eviction writes chain nodes to the disk store once, within its budget") {
  // Device 100, host 100, disk 200: nodes at depth 2 (chain nodes) go down to disk; depth 1 does not.
  KnowledgeTree t(CachePolicy::lru, budgets(100, 100, 200));
  LogMover m;
  m.tree = &t;
  t.set_mover(&m);
  const int root = t.add(Path{"@p"}, 10, 0);  // the prefix: 0 bytes here, pinned on disk
  t.note_on_disk(root, /*pinned=*/true);
  auto chain = [&](const std::string& a, const std::string& b) {
    std::vector<NodeUse> uses{{root, KvTier::disk, 0}, {t.add(Path{"@p", a}, 100, 100), KvTier::disk, 1},
                              {t.add(Path{"@p", a, b}, 100, 100), std::nullopt, 5}};
    t.note_on_disk(uses[1].node, /*pinned=*/true);
    t.record_request(uses);
  };
  chain("a", "b");  // a takes the device; a/b, computed, finds it full of its own request: host
  chain("c", "d");  // evictions cascade: device → host → disk; a/b written to disk
  for (KvTier tier : {KvTier::device, KvTier::host, KvTier::disk})
    CHECK(t.bytes(tier) <= t.budgets().bytes[size_t(tier)]);
  CHECK(held(t, {"@p", "a", "b"}, KvTier::disk));
  CHECK(t.stats(KvTier::host).swapped_out >= 1);
  chain("e", "f");
  chain("g", "h");  // the disk holds two chain nodes at most: the oldest goes from there too
  CHECK(t.bytes(KvTier::disk) <= 200);
  CHECK(t.stats(KvTier::disk).evicted >= 1);
  size_t writes = 0;
  for (const std::string& s : m.log) writes += s.ends_with(">disk");
  CHECK(writes == t.stats(KvTier::disk).placed);
  // Canonical (depth-1) nodes are never written to disk by the tree.
  for (const std::string& s : m.log) CHECK_FALSE((s.starts_with("a ") && s.ends_with(">disk")));
}

TEST_CASE("knowledge tree: budgets are never exceeded on random traces, for every policy") {
  for (CachePolicy policy : {CachePolicy::pgdsf, CachePolicy::gdsf, CachePolicy::lru}) {
    CAPTURE(cache_policy_name(policy));
    KnowledgeTree t(policy, budgets(700, 1500, 2500));
    LogMover m;
    m.tree = &t;
    t.set_mover(&m);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> pick(0, 11), len(1, 4), size(30, 400), costd(1, 20);
    for (int r = 0; r < 400; ++r) {
      Path p{"@p"};
      std::vector<NodeUse> uses{{t.add(p, 5, 5), t.find(p) >= 0 && t.top_tier(t.find(p)) ? t.top_tier(t.find(p)) : std::nullopt, 1}};
      const int k = len(rng);
      for (int i = 0; i < k; ++i) {
        std::string id = "c";  // (not "c" + …: GCC 12 warns falsely, -Wrestrict)
        id += std::to_string(pick(rng));
        p.push_back(id);
        const int n = t.add(p, 50, uint64_t(size(rng)));
        uses.push_back({n, t.top_tier(n), double(costd(rng))});
      }
      t.record_request(uses);
      for (KvTier tier : {KvTier::device, KvTier::host, KvTier::disk}) {
        REQUIRE(t.bytes(tier) <= t.budgets().bytes[size_t(tier)]);
        uint64_t sum = 0;  // the accounting matches the nodes, and the mover's copies
        size_t copies = 0;
        for (size_t n = 0; n < t.size(); ++n) {
          const TreeNode& node = t.node(int(n));
          if (!node.live || !node.in[size_t(tier)]) continue;
          if (!(tier == KvTier::disk && node.pinned_disk)) sum += node.bytes;
          ++copies;
          CHECK(m.held.count({int(n), int(tier)}) == 1);
        }
        CHECK(sum == t.bytes(tier));
        size_t mover = 0;
        for (const auto& [n, tt] : m.held) mover += tt == int(tier);
        CHECK(mover == copies);
      }
    }
    CHECK(t.stats(KvTier::device).evicted > 0);
    CHECK(t.stats(KvTier::host).evicted > 0);
  }
}

TEST_CASE("knowledge tree: a node larger than a tier's budget is rejected there, nothing else changes") {
  KnowledgeTree t(CachePolicy::pgdsf, budgets(0, 150, 0));
  computed(t, "A", 1);
  std::vector<NodeUse> big{{t.add(Path{"B"}, 1000, 1000), std::nullopt, 1}};
  t.record_request(big);
  CHECK(held(t, {"A"}, KvTier::host));
  CHECK_FALSE(held(t, {"B"}, KvTier::host));
  CHECK(t.stats(KvTier::host).rejected == 1);
  std::vector<NodeUse> refused{{t.add(Path{"C"}, 100, 100), std::nullopt, 1, /*admit=*/false}};
  t.record_request(refused);  // CRAFT's promotion threshold said not yet
  CHECK_FALSE(held(t, {"C"}, KvTier::host));
}

TEST_CASE("prefill cost model: bilinear on the profiled grid, a least-squares fit without one") {
  PrefillCostModel m;
  CHECK(m.estimate_ms(100, 50) == doctest::Approx(50));  // nothing known: a token is the unit
  // T = 2 + 0.5·β + 0.001·α·β is bilinear in (α, β): reproduced exactly inside and outside the grid.
  auto t = [](double a, double b) { return 2 + 0.5 * b + 0.001 * a * b; };
  const std::vector<double> as{0, 512, 2048}, bs{16, 256, 1024};
  std::vector<std::vector<double>> ms;
  for (double a : as) {
    ms.emplace_back();
    for (double b : bs) ms.back().push_back(t(a, b));
  }
  PrefillCostModel g;
  g.set_grid(as, bs, ms);
  CHECK(g.estimate_ms(300, 100) == doctest::Approx(t(300, 100)));
  CHECK(g.estimate_ms(4000, 2000) == doctest::Approx(t(4000, 2000)));
  const PrefillCostModel back = PrefillCostModel::from_json(g.to_json());
  CHECK(back.estimate_ms(700, 33) == doctest::Approx(t(700, 33)));
  // The online fit recovers the same plane from observations.
  for (double a : {0.0, 100.0, 900.0, 1500.0})
    for (double b : {20.0, 300.0, 800.0}) m.observe(a, b, t(a, b));
  CHECK(m.estimate_ms(450, 600) == doctest::Approx(t(450, 600)).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(g.set_grid({1, 0}, bs, ms), doctest::Contains("must ascend"), Error);
}
