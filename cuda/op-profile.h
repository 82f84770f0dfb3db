// Per-op device time of the CUDA backend (issue 40 item 7: where a target is missed, the profile
// says why), on when RAGKV_CUDA_PROFILE names a JSON file: each op is bracketed by two CUDA events
// on the backend's stream, and the table of time per op, path and phase is written there when the
// backend is destroyed (the last backend of a process to go wins the file).
//
// Ops are grouped by section (Backend::set_profile_section: the bench names its prefill, its
// decodes, each mode and tier; "" before any), then by op and path, then by phase. The phase is
// read off the op's row count: "decode" for at most kQuantGemvMaxRows rows (decode
// steps, batched decode, short recompute batches), "prefill" for more. Besides each op's time,
// every phase counts the device's idle time before its ops (from the previous op's end to the
// op's start): launch gaps, host synchronisations and the host's own work between steps, the
// time a CUDA graph would remove.
//
// Events cost about a microsecond each to record and keep a step from running ahead of the host
// by more than the batch below, so profiled runs are for the breakdown, not for headline figures.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ragkv {

// The table (host only, testable without a GPU): time per (section, op, phase) and idle time per
// (section, phase).
class OpTimeTable {
 public:
  static std::string_view phase_of(int64_t rows);
  // One op of `rows` rows in `section` that ran `ms`, `idle_ms` after the previous op ended.
  void add(std::string_view section, std::string_view op, int64_t rows, double ms, double idle_ms);
  // {"device", "kernels", "span_ms", "sections": [{"section", "phases": {phase: {busy_ms, idle_ms,
  //  ops}}, "ops": [{op, phase, calls, rows, ms, ms_per_call, share_of_phase}, ...] by time,
  //  longest first}, ...] in the order the sections first appeared}.
  std::string json(std::string_view device, std::string_view kernels, double span_ms) const;
  bool empty() const { return sections_.empty(); }

 private:
  struct Total {
    int64_t calls = 0, rows = 0;
    double ms = 0;
  };
  struct Phase {
    double busy_ms = 0, idle_ms = 0;
    int64_t ops = 0;
  };
  struct Section {
    std::string name;
    std::map<std::pair<std::string, std::string>, Total> ops;  // (op, phase)
    std::map<std::string, Phase> phases;
  };
  std::vector<Section> sections_;  // in order of appearance (a handful: looked up linearly)
};

// The events around the ops of one stream, folded into an OpTimeTable in batches.
class CudaOpProfiler {
 public:
  CudaOpProfiler(std::string path, cudaStream_t stream);
  ~CudaOpProfiler();  // destroys the events; write() first to keep the table
  CudaOpProfiler(const CudaOpProfiler&) = delete;
  CudaOpProfiler& operator=(const CudaOpProfiler&) = delete;

  // The section of the ops that follow.
  void set_section(std::string_view name) { section_ = name; }

  // Brackets one op: the start event is recorded now, the stop event when the scope ends.
  class Scope {
   public:
    Scope() = default;
    Scope(CudaOpProfiler* p, std::string op, int64_t rows);
    ~Scope();
    Scope(Scope&& o) noexcept : p_(o.p_), index_(o.index_) { o.p_ = nullptr; }
    Scope& operator=(Scope&&) = delete;

   private:
    CudaOpProfiler* p_ = nullptr;
    size_t index_ = 0;
  };

  // Folds every event recorded so far into the table and writes it to the file (atomically).
  void write(std::string_view device, std::string_view kernels);

 private:
  struct Pending {
    std::string section, op;
    int64_t rows = 0;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  std::string path_;
  cudaStream_t stream_;
  std::string section_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  cudaEvent_t first_ = nullptr;      // the first op's start (kept for span_ms)
  cudaEvent_t last_stop_ = nullptr;  // the previous batch's last stop (for the next op's idle time)
  double span_ms_ = 0;
  int open_ = 0;  // scopes begun and not yet ended (ops do not nest; a drain waits for them)
  OpTimeTable table_;

  cudaEvent_t take_event();
  void drain();  // waits for the pending events and folds them in
};

}  // namespace ragkv
