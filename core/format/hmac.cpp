// HmacSha256 on OpenSSL 3's EVP_MAC interface.
#include "core/format/hmac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "core/util/error.h"

namespace ragkv {

struct HmacSha256::Impl {
  EVP_MAC* mac = nullptr;
  EVP_MAC_CTX* ctx = nullptr;
  ~Impl() {
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
  }
};

HmacSha256::HmacSha256(std::span<const uint8_t> key) : impl_(std::make_unique<Impl>()) {
  impl_->mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!impl_->mac) fail("OpenSSL has no HMAC (libcrypto)");
  impl_->ctx = EVP_MAC_CTX_new(impl_->mac);
  if (!impl_->ctx) fail("OpenSSL: cannot create an HMAC context");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(impl_->ctx, key.data(), key.size(), params) != 1) fail("OpenSSL: HMAC-SHA256 init failed");
}

HmacSha256::~HmacSha256() = default;

void HmacSha256::update(const void* data, size_t n) {
  if (n > 0 && EVP_MAC_update(impl_->ctx, static_cast<const unsigned char*>(data), n) != 1)
    fail("OpenSSL: HMAC-SHA256 update failed");
}

Sha256Digest HmacSha256::final() {
  Sha256Digest out{};
  size_t len = 0;
  if (EVP_MAC_final(impl_->ctx, out.data(), &len, out.size()) != 1 || len != out.size())
    fail("OpenSSL: HMAC-SHA256 final failed");
  return out;
}

bool digests_equal(const Sha256Digest& a, const Sha256Digest& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

}  // namespace ragkv
