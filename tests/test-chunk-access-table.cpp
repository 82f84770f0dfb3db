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
