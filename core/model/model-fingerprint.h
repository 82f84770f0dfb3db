// The identity of a model's weights, stamped into every chunk-KV file (DESIGN.md §1 "Files",
// STYLE.md convention 8) so a cache computed by another model is never used.
#pragma once
#include <string>

namespace ragkv {

class GgufFile;

// "<architecture>-<16 hex digits>": XXH64 over the GGUF header (every metadata value and tensor
// info: names, types, shapes, offsets) and every byte of every tensor, so two files with the same
// metadata and any weight changed — a fine-tune, another quantisation, a weight update — never
// share caches. Reading the weights costs one pass over the mapped file (the model's load reads
// them anyway): about 0.1 s per GB here.
std::string model_fingerprint(const GgufFile& gguf);

}  // namespace ragkv
