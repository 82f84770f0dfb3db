// The compiler builds what the source says. GCC 12.2 with AVX-512 on (-march=native on this
// project's machines) built the vector below as four 0.1 — one vpbroadcastq for a constant that
// is not a broadcast — and with it a wrong recovery in tests/test-gate.cpp. CMakeLists.txt turns
// AVX-512 off for such compilers; this test fails if a build brings the miscompile back.
#include <doctest/doctest.h>

#include <vector>

TEST_CASE("toolchain: a vector constant with trailing zeros is built as written") {
  const std::vector<double> ref = {0.4, 0.2, 0.6, 0.0}, mode = {0.1, 0.1, 0.0, 0.0};
  REQUIRE(mode.size() == 4);
  CHECK(mode[0] == 0.1);
  CHECK(mode[1] == 0.1);
  CHECK(mode[2] == 0.0);
  CHECK(mode[3] == 0.0);
  CHECK(ref[3] == 0.0);
}
