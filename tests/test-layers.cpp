// The layering rule of DESIGN.md §2, checked on the source tree: folders are layers (the engine's
// under core/), and a file includes only from its own folder or from a layer below. Peers (cuda/model, retrieval/kv) do
// not include each other. Each folder is one CMake library linked in the same direction, so an
// upward include that slipped past the linker (a header-only use) still fails here.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test-paths.h"

namespace {

namespace fs = std::filesystem;

// Rank of each layer, lowest first; equal ranks are peers.
const std::map<std::string, int>& layer_ranks() {
  static const std::map<std::string, int> ranks = {
      {"core/util", 0}, {"core/format", 1}, {"core/backend", 2}, {"cuda", 3},  {"core/model", 3},
      {"retrieval", 4}, {"core/kv", 4},     {"core/rag", 5},     {"core/eval", 6}, {"bench", 7},
      {"cmd", 8},
  };
  return ranks;
}

// The includes of `text` (a file of layer `layer`, named `name`) that break the rule, one
// "name:line: includes "x/..." (layer x is not below layer)" each; a layer under core/ is named
// with its prefix ("core/rag").
std::vector<std::string> layering_violations(const std::string& name, const std::string& layer,
                                             const std::string& text) {
  static const std::regex include_re(R"re(^\s*#\s*include\s*"((?:core/)?[^"/]+)/[^"]+")re");
  const auto& ranks = layer_ranks();
  const int own = ranks.at(layer);
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    std::smatch m;
    if (!std::regex_search(line, m, include_re)) continue;
    const std::string target = m[1];
    const auto it = ranks.find(target);
    if (it == ranks.end() || target == layer) continue;  // a library's own folder, or not a layer
    if (it->second < own) continue;
    out.push_back(name + ":" + std::to_string(no) + ": includes \"" + target + "/...\" (layer " + target +
                  " is not below " + layer + ")");
  }
  return out;
}

}  // namespace

TEST_CASE("layers: the checker flags upward and sideways includes, and passes downward ones") {
  CHECK(layering_violations("core/kv/a.cpp", "core/kv", "#include \"core/util/error.h\"\n#include \"core/backend/backend.h\"\n").empty());
  CHECK(layering_violations("core/kv/a.cpp", "core/kv", "#include \"core/kv/kv-store.h\"\n#include <vector>\n").empty());
  const auto up = layering_violations("core/model/m.cpp", "core/model", "// x\n#include \"core/rag/plan.h\"\n");
  REQUIRE(up.size() == 1);
  CHECK(up[0] == "core/model/m.cpp:2: includes \"core/rag/...\" (layer core/rag is not below core/model)");
  CHECK(layering_violations("cuda/c.cpp", "cuda", "  #  include \"core/model/model.h\"").size() == 1);  // a peer
  CHECK(layering_violations("retrieval/r.h", "retrieval", "#include \"core/kv/kv-store.h\"").size() == 1);
  CHECK(layering_violations("core/kv/k.h", "core/kv", "#include \"retrieval/index-dir.h\"").size() == 1);
  CHECK(layering_violations("core/rag/r.cpp", "core/rag", "#include \"retrieval/index-dir.h\"").empty());
  CHECK(layering_violations("core/backend/b.cpp", "core/backend", "#include \"cuda/cuda-backend.h\"").size() == 1);
}

TEST_CASE("layers: no file of the source tree includes from a layer above its own") {
  std::vector<std::string> violations;
  size_t files = 0;
  for (const auto& [layer, rank] : layer_ranks()) {
    const fs::path dir = ragkv::test::source_dir() / layer;
    REQUIRE_MESSAGE(fs::is_directory(dir), dir.string() << " is missing: update layer_ranks() with the layout");
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".inc"))
        continue;
      std::ifstream f(e.path());
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const auto v = layering_violations(fs::relative(e.path(), ragkv::test::source_dir()).string(), layer, text);
      violations.insert(violations.end(), v.begin(), v.end());
      ++files;
    }
  }
  CHECK(files > 50);
  for (const auto& v : violations) MESSAGE(v);
  CHECK(violations.empty());
}
