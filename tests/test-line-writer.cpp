// LineWriter: FILE.partial while a run writes, FILE at its end; a run that stops keeps a
// FILE.partial with lines (to resume from) and leaves none without.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/line-writer.h"
#include "tests/test-tempdir.h"

namespace fs = std::filesystem;

TEST_CASE("line writer: lines reach FILE at close, and a stopped run leaves a partial file only with lines in it") {
  const ragkv::test::TempDir tmp("line-writer");
  const fs::path out = tmp.path / "out.jsonl", partial = tmp.path / "out.jsonl.partial";
  {
    ragkv::LineWriter w(out.string());
    CHECK(fs::exists(partial));
  }  // stopped before any line (an error on the way): nothing to resume from, nothing left
  CHECK_FALSE(fs::exists(partial));
  CHECK_FALSE(fs::exists(out));
  {
    ragkv::LineWriter w(out.string());
    w.line("{\"id\":1}");
  }  // stopped after a line: kept for --resume
  CHECK(ragkv::read_file(partial) == "{\"id\":1}\n");
  {
    ragkv::LineWriter w(out.string(), {"{\"id\":1}"});
    w.line("{\"id\":2}");
    w.close();
  }
  CHECK(ragkv::read_file(out) == "{\"id\":1}\n{\"id\":2}\n");
  CHECK_FALSE(fs::exists(partial));
}
