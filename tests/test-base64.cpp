// core/util/base64: RFC 4648 §10 test vectors, round trips of every length over all byte values, and
// refusal of malformed text.
#include <doctest/doctest.h>

#include <string>

#include "core/util/base64.h"

using ragkv::base64_decode;
using ragkv::base64_encode;

TEST_CASE("base64: RFC 4648 test vectors") {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},  {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    CHECK(base64_encode(plain) == coded);
    REQUIRE(base64_decode(coded).has_value());
    CHECK(*base64_decode(coded) == plain);
  }
}

TEST_CASE("base64: every byte value round-trips at every length up to 300") {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    const std::string enc = base64_encode(bytes);
    CHECK(enc.size() == (bytes.size() + 2) / 3 * 4);
    const auto dec = base64_decode(enc);
    REQUIRE(dec.has_value());
    CHECK(*dec == bytes);
    bytes += char((i * 97 + 13) & 0xff);
  }
}

TEST_CASE("base64: malformed text is refused") {
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm9v!A==", "Zg==Zg==", "=Zg=", "Zm=v"})
    CHECK_MESSAGE(!base64_decode(bad).has_value(), bad);
}
