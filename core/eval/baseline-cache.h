// The baseline's answers kept between eval runs (`ragkv eval --baseline-cache FILE`). Full
// recompute is the expensive part of an evaluation and does not depend on the modes, the store or
// the gate: a run that finds the baseline of a prompt in the cache takes it from there — answer,
// output ids, metrics and the first step's logits (for KL), bit for bit what this binary computed
// before — and computes only the modes. An entry is used only when everything its output depends
// on is equal: this executable (a hash of its file, so a rebuilt engine never trusts an old
// baseline), the model fingerprint, the device, the threads (its TTFT), the store's KV encoding,
// the baseline mode, the answer length limit and the prompt's token ids; otherwise the baseline is
// computed and added.
//
// File: JSONL, one entry per line, appended under an exclusive flock so runs may share a file:
//   {"key":"<hex>","id":QUERY_ID,"record":{answer, output_ids, stats...},"first_logits":BASE64_F32_LE}
// A last line cut short (a run killed while writing) is ignored and overwritten by later appends.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "core/rag/answer.h"

namespace ragkv {

// What a baseline answer depends on (hashed into the key).
struct BaselineKey {
  std::string model_fingerprint, baseline;
  // engine_identity(…).dump() (core/eval/records.h): binary, model, device, kernels, threads and
  // the store's KV encoding — what --resume compares, so both follow one definition.
  std::string engine;
  int max_tokens = 0;
  uint64_t prompt_hash = 0;  // RagAnswerer::prompt_hash
};

// XXH64 of this process's executable file (/proc/self/exe), hex; computed once.
const std::string& engine_fingerprint();

class BaselineCache {
 public:
  // Reads the entries of path when it exists (malformed lines other than a cut last one: Error
  // naming path:line); the file is created on the first add.
  explicit BaselineCache(std::filesystem::path path);

  std::optional<AnswerRecord> find(const BaselineKey& key) const;
  // Appends (and keeps) the entry; a record with craft choices cannot be kept (Error).
  void add(const BaselineKey& key, const std::string& query_id, const AnswerRecord& record);

  size_t size() const { return entries_.size(); }
  const std::filesystem::path& path() const { return path_; }

  static std::string key_hex(const BaselineKey& key);

 private:
  std::filesystem::path path_;
  std::map<std::string, AnswerRecord> entries_;
};

}  // namespace ragkv
