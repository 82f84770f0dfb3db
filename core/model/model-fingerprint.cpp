// Model fingerprint: XXH64 of the GGUF header and of every tensor's bytes. The tensors are read
// from the file in pieces, not through the mapping: a model whose weights the backend keeps in
// its own layout has released its mapped pages (WeightMemory::kernel_layout), and hashing through
// the mapping would fault the whole file back in (twice the resident size).
#include "core/model/model-fingerprint.h"

#include <algorithm>
#include <vector>

#include "core/format/checksum.h"
#include "core/format/gguf.h"

namespace ragkv {

std::string model_fingerprint(const GgufFile& gguf) {
  Checksum64 h;
  h.update(gguf.header_bytes());
  std::vector<uint8_t> piece(size_t(4) << 20);
  for (const GgufTensor& t : gguf.tensors())
    for (size_t pos = 0; pos < t.nbytes; pos += piece.size()) {
      const size_t n = std::min(piece.size(), t.nbytes - pos);
      gguf.read_tensor_bytes(t, pos, piece.data(), n);
      h.update(piece.data(), n);
    }
  std::string arch = gguf.find_string("general.architecture").value_or("unknown");
  return arch + "-" + checksum_hex(h.digest());
}

}  // namespace ragkv
