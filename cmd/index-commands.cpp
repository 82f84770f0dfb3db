// build-index and search: the retrieval side (DESIGN.md §5), INDEX_DIR in and out.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cmd/command-family.h"
#include "cmd/flag-table.h"
#include "core/format/gguf.h"
#include "core/model/tokenizer.h"
#include "retrieval/corpus.h"
#include "core/model/embedder.h"
#include "retrieval/index-dir.h"
#include "core/util/paths.h"
#include "core/util/progress.h"

namespace ragkv::cli {

namespace {

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

uint64_t dir_bytes(const std::filesystem::path& dir) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

class IndexCommands : public CommandFamily {
 public:
  explicit IndexCommands(CliOptions& o) : o_(o) {}

  void add_to(CLI::App& app) override {
    build_ = app.add_subcommand("build-index", "Chunk and embed a corpus into an HNSW index (INDEX_DIR)");
    add_flags(build_, kBuildIndex, o_);
    search_ = app.add_subcommand("search", "Top-k chunks of an index for a query (JSON lines)");
    add_flags(search_, kSearch, o_);
  }

  bool selected() const override { return *build_ || *search_; }

  int run() override {
    if (*build_) run_build_index();
    if (*search_) run_search();
    return 0;
  }

 private:
  // Files of other types in the corpus directories: counted per extension and named on stderr.
  static nlohmann::json report_other_files(const Corpus& corpus) {
    nlohmann::json other = nlohmann::json::object();
    if (corpus.other_files.empty()) return other;
    size_t n = 0;
    std::string kinds;
    for (const auto& [ext, count] : corpus.other_files) {
      other[ext.empty() ? "(none)" : ext] = count;
      kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", count, ext.empty() ? "without extension" : ext);
      n += count;
    }
    std::fprintf(stderr, "ragkv: build-index: %zu files of other types not indexed (%s; e.g. %s); --ext adds extensions read as text\n",
                 n, kinds.c_str(), fmt::format("{}", fmt::join(corpus.other_file_examples, ", ")).c_str());
    return other;
  }

  void run_build_index() {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const std::vector<std::filesystem::path> inputs(o_.corpus.begin(), o_.corpus.end());
    const Corpus corpus = load_corpus(inputs, parse_on_error(o_.on_error), text_extensions(o_.ext));
    for (const auto& p : corpus.skipped) std::fprintf(stderr, "ragkv: skipped %s\n", p.message.c_str());
    const nlohmann::json other = report_other_files(corpus);

    GgufFile gguf(o_.model);
    const auto tok = Tokenizer::from_gguf(gguf);
    auto backend = o_.dev.make_backend();
    Embedder embedder;
    embedder.load(o_.embedder, *backend);
    IndexBuildOptions opt = o_.build;
    opt.chunking.chunk_tokens = o_.chunk_tokens.value_or(opt.chunking.chunk_tokens);
    opt.chunking.chunking = parse_chunking(o_.chunking.value_or("content"));  // content: the default (bench/results, "Corpora that change")
    opt.tokenizer_fingerprint = tokenizer_fingerprint(gguf);
    opt.embedder_fingerprint = embedder.fingerprint();

    std::unique_ptr<Progress> bar;
    std::string stage;
    const auto progress = [&](std::string_view st, size_t done, size_t total) {
      if (st != stage) {
        if (bar) bar->finish();
        stage = st;
        bar = std::make_unique<Progress>("build-index: " + stage, int64_t(total), st == "chunk" ? "bytes" : "chunks");
      }
      bar->set(int64_t(done));
    };
    const auto embed = [&](const std::vector<std::string>& texts) { return embedder.embed(texts); };
    std::optional<IndexUpdate> update;
    if (o_.update) update = update_index_dir(o_.out, corpus.docs, *tok, embed, opt, progress);
    const IndexManifest m = update ? update->manifest : build_index_dir(o_.out, corpus.docs, *tok, embed, opt, progress);
    if (bar) bar->finish();
    const double secs = std::chrono::duration<double>(clock::now() - t0).count();
    if (update && (m.chunking.chunking != opt.chunking.chunking || m.chunking.chunk_tokens != opt.chunking.chunk_tokens) &&
        (o_.chunk_tokens || o_.chunking))
      std::fprintf(stderr, "ragkv: build-index --update: the index's own chunking (%s, %d tokens) was kept; build a new "
                   "index for other chunking\n", chunking_name(m.chunking.chunking), m.chunking.chunk_tokens);

    nlohmann::json skipped = nlohmann::json::object();
    for (const auto& [kind, n] : corpus.skipped_by_kind()) skipped[kind] = n;
    nlohmann::json out{{"index", o_.out}, {"documents", m.n_documents}, {"chunks", m.n_chunks},
                       {"chunking", chunking_name(m.chunking.chunking)},
                       {"dim", m.dim}, {"skipped", skipped}, {"other_files", other}, {"seconds", secs},
                       {"chunks_per_s", double(m.n_chunks) / secs}, {"index_bytes", dir_bytes(o_.out)},
                       {"peak_rss_mib", peak_rss_mib()}};
    if (update)
      out["update"] = {{"generation", update->generation}, {"previous_generation", update->previous_generation},
                       {"unchanged_chunks", update->unchanged}, {"added_chunks", update->added},
                       {"removed_chunks", update->removed}, {"embedded", update->embedded},
                       {"reused_embeddings", update->reused_embeddings}};
    std::cout << out.dump() << "\n";
  }

  void run_search() {
    auto backend = o_.dev.make_backend();
    Embedder embedder;
    embedder.load(o_.embedder, *backend);
    const IndexDir index = IndexDir::open(o_.index, embedder.fingerprint());
    const std::vector<float> e = embedder.embed({o_.query});
    const auto hits = index.search(e, o_.k, o_.exact);
    for (size_t r = 0; r < hits.size(); ++r) {
      const Chunk& c = index.chunks()[hits[r].chunk];
      std::cout << nlohmann::json{{"rank", r + 1}, {"id", c.id}, {"doc", c.doc}, {"score", hits[r].score}, {"text", c.text}}
                       .dump()
                << "\n";
    }
  }

  CliOptions& o_;
  CLI::App *build_ = nullptr, *search_ = nullptr;
};

}  // namespace

std::unique_ptr<CommandFamily> index_commands(CliOptions& o) { return std::make_unique<IndexCommands>(o); }

}  // namespace ragkv::cli
