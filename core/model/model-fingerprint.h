// The identity of a model's weights, stamped into every chunk-KV file (DESIGN.md §1 "Files",
// STYLE.md convention 8) so a cache computed by another model is never used.
#pragma once
#include <string>

namespace ragkv {

class GgufFile;

// "<architecture>-<16 hex digits>": XXH64 over the GGUF header (every metadata value and tensor
// info: names, types, shapes, offsets) and a sample of every tensor's data (its first and last
// 16 KiB), so two fine-tunes of one architecture, or two quantisations, differ. Cheap for any
// model size: it never reads whole tensors.
std::string model_fingerprint(const GgufFile& gguf);

}  // namespace ragkv
