// LineWriter: FILE.partial written line by line, renamed to FILE at the end.
#include "core/util/line-writer.h"

#include <filesystem>
#include <iostream>
#include <system_error>

#include "core/util/error.h"
#include "core/util/file-io.h"

namespace ragkv {

LineWriter::LineWriter(std::string path, const std::vector<std::string>& initial) : path_(std::move(path)) {
  if (path_.empty()) return;
  const std::string partial = path_ + ".partial";
  std::string text;
  for (const auto& l : initial) text += l + "\n";
  write_file_atomic(partial, {text});
  file_.open(partial, std::ios::binary | std::ios::app);
  if (!file_) fail("{}: cannot write", partial);
}

void LineWriter::line(const std::string& s) {
  std::ostream& o = path_.empty() ? std::cout : file_;
  o << s << "\n";
  o.flush();
  if (!o) fail("{}: write failed", path_.empty() ? "stdout" : path_);
}

void LineWriter::close() {
  if (path_.empty()) return;
  file_.close();
  std::error_code ec;
  std::filesystem::rename(path_ + ".partial", path_, ec);
  if (ec) fail("{}: cannot rename {}.partial into place: {}", path_, path_, ec.message());
}

}  // namespace ragkv
