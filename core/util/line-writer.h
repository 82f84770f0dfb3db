// Line-by-line output that survives interruption (DESIGN.md §7): ANSWERS.jsonl and eval records.
// Lines stream to FILE.partial, flushed one by one, and FILE.partial is renamed to FILE when the
// run ends; without a path they go to stdout.
#pragma once
#include <fstream>
#include <string>
#include <vector>

namespace ragkv {

class LineWriter {
 public:
  // `initial` lines (records kept by --resume) are written first, atomically: FILE.partial is
  // replaced, never truncated, so an interruption at any point leaves them in place.
  explicit LineWriter(std::string path, const std::vector<std::string>& initial = {});
  void line(const std::string& s);  // Error when the write fails
  void close();                     // FILE.partial → FILE

 private:
  std::string path_;
  std::ofstream file_;
};

}  // namespace ragkv
