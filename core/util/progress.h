// Progress of long work on stderr (DESIGN.md §1): a redrawn bar with rate and ETA when stderr
// is a terminal, a plain line every few seconds otherwise. stdout is never touched.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace ragkv {

class Progress {
 public:
  // total 0: unknown (no ETA). unit names what is counted ("chunks", "queries").
  Progress(std::string label, int64_t total, std::string unit);
  ~Progress();
  void add(int64_t n = 1);
  void set(int64_t done);
  void finish();  // final line with the totals; called by the destructor if not before

 private:
  using clock = std::chrono::steady_clock;
  std::string label_, unit_;
  int64_t total_, done_ = 0;
  bool tty_, finished_ = false;
  clock::time_point start_, last_print_;
  void print(bool final);
};

// "1.5 s", "2 min 03 s", "1 h 02 min".
std::string format_duration(double seconds);

}  // namespace ragkv
