// Model fingerprint: XXH64 of the GGUF header and of sampled tensor bytes.
#include "core/model/model-fingerprint.h"

#include <algorithm>

#include "core/format/checksum.h"
#include "core/format/gguf.h"

namespace ragkv {

std::string model_fingerprint(const GgufFile& gguf) {
  constexpr size_t kSample = 16 * 1024;
  Checksum64 h;
  h.update(gguf.header_bytes());
  for (const GgufTensor& t : gguf.tensors()) {
    const size_t head = std::min(t.nbytes, kSample);
    h.update(t.data, head);
    if (t.nbytes > head) {
      const size_t tail = std::min(t.nbytes - head, kSample);
      h.update(t.data + t.nbytes - tail, tail);
    }
  }
  std::string arch = gguf.find_string("general.architecture").value_or("unknown");
  return arch + "-" + checksum_hex(h.digest());
}

}  // namespace ragkv
