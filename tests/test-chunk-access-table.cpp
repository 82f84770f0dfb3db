// CRAFT's CA-Table (core/rag/chunk-access-table.h): the paper's worked example of promotion (§4,
// threshold 2), the sliding window, and frequency order with ties in retrieval order.
#include <doctest/doctest.h>

#include "core/rag/chunk-access-table.h"
#include "core/util/error.h"

using namespace ragkv;

TEST_CASE("CA-Table: CRAFT's example: [C1, C2] promoted at threshold 2, C6 only on its second use") {
  ChunkAccessTable t(1000, 2);
  t.record({"C1", "C2"});  // the table starts with C1: 1, C2: 1
  t.record({"C1", "C2", "C5"});
  CHECK(t.count("C1") == 2);
  CHECK(t.promoted({"C1", "C2", "C5"}) == std::vector<uint8_t>{1, 1, 0});
  t.record({"C1", "C2", "C6"});
  CHECK(t.promoted({"C1", "C2", "C6"}) == std::vector<uint8_t>{1, 1, 0});
  t.record({"C1", "C2", "C6"});
  CHECK(t.promoted({"C1", "C2", "C6"}) == std::vector<uint8_t>{1, 1, 1});
  // A chunk below the threshold ends the promoted prefix even when later ones reach it.
  CHECK(t.promoted({"C5", "C1"}) == std::vector<uint8_t>{0, 0});
}

TEST_CASE("CA-Table: counts cover the last window requests only, and order chunks by frequency") {
  ChunkAccessTable t(2, 1);
  t.record({"a", "b"});
  t.record({"b", "c"});
  CHECK(t.count("b") == 2);
  t.record({"c"});  // {"a","b"} leaves the window
  CHECK(t.count("a") == 0);
  CHECK(t.count("b") == 1);
  CHECK(t.count("c") == 2);
  CHECK(t.entries() == 2);
  CHECK(t.frequency_order({"a", "b", "c", "d"}) == std::vector<size_t>{2, 1, 0, 3});  // c 2, b 1, then a, d (0) in order
  CHECK_THROWS_AS(ChunkAccessTable(0, 1), Error);
}

TEST_CASE("CA-Table: admit orders a request by the counts before it, then counts it, then marks promotion") {
  ChunkAccessTable ca(10, 2);
  ca.record({"b"});
  // b was seen once, a and c never: b first; then every chunk counted once more.
  const ChunkAccessTable::Admission a = ca.admit({"a", "b", "c"}, /*freq_order=*/true);
  CHECK(a.order == std::vector<size_t>{1, 0, 2});
  CHECK(ca.count("b") == 2);
  CHECK(ca.count("a") == 1);
  // Promotion over the prompt's order (b, a, c): b has reached 2, a has not, so only the first prefix.
  CHECK(a.promote == std::vector<uint8_t>{1, 0, 0});
  // Retrieval order kept without freq_order; a threshold of 1 promotes every prefix (empty marks).
  ChunkAccessTable plain(10, 1);
  const ChunkAccessTable::Admission p = plain.admit({"x", "y"}, /*freq_order=*/false);
  CHECK(p.order == std::vector<size_t>{0, 1});
  CHECK(p.promote.empty());
  CHECK(plain.count("y") == 1);
}
