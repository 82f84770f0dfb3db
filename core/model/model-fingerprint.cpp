// Model fingerprint: XXH64 of the GGUF header and of every tensor's bytes.
#include "core/model/model-fingerprint.h"

#include "core/format/checksum.h"
#include "core/format/gguf.h"

namespace ragkv {

std::string model_fingerprint(const GgufFile& gguf) {
  Checksum64 h;
  h.update(gguf.header_bytes());
  for (const GgufTensor& t : gguf.tensors()) h.update(t.data, t.nbytes);
  std::string arch = gguf.find_string("general.architecture").value_or("unknown");
  return arch + "-" + checksum_hex(h.digest());
}

}  // namespace ragkv
