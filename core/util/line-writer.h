// Line-by-line output that survives interruption (DESIGN.md §7): ANSWERS.jsonl and eval records.
// Lines stream to FILE.partial, written one by one, and FILE.partial is renamed to FILE when the
// run ends; without a path they go to stdout.
#pragma once
#include <string>
#include <vector>

namespace ragkv {

class LineWriter {
 public:
  // `initial` lines (records kept by --resume) are written first, atomically: FILE.partial is
  // replaced, never truncated, so an interruption at any point leaves them in place.
  explicit LineWriter(std::string path, const std::vector<std::string>& initial = {});
  // A run that stops before close() keeps FILE.partial when it holds lines (--resume reads
  // them) and removes it when it holds none.
  ~LineWriter();
  LineWriter(const LineWriter&) = delete;
  LineWriter& operator=(const LineWriter&) = delete;

  void line(const std::string& s);  // Error naming the file and the reason when the write fails
  void close();                     // FILE.partial → FILE

 private:
  std::string path_;
  int fd_ = -1;
  size_t lines_ = 0;  // in FILE.partial, the initial ones included
};

}  // namespace ragkv
