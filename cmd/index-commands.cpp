// build-index and search: the retrieval side (DESIGN.md §5), INDEX_DIR in and out.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cmd/command-family.h"
#include "cmd/device-flags.h"
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
  void add_to(CLI::App& app) override {
    build_ = app.add_subcommand("build-index", "Chunk and embed a corpus into an HNSW index (INDEX_DIR)");
    model_ = default_llm_path();
    embedder_ = default_embedder_dir();
    build_->add_option("--corpus", corpus_, ".txt/.md files or directories, or .jsonl {id,title?,text}")->required();
    build_->add_option("--out", out_, "Index directory to write")->required();
    build_->add_option("--chunk-tokens", opt_.chunking.chunk_tokens, "Chunk length in LLM tokens")->check(CLI::Range(16, 1 << 16))->capture_default_str();
    build_->add_option("--chunk-overlap", opt_.chunking.chunk_overlap, "Tokens shared by consecutive chunks")->check(CLI::NonNegativeNumber)->capture_default_str();
    build_->add_option("--model", model_, "LLM whose tokenizer counts chunk tokens")->capture_default_str();
    build_->add_option("--embedder", embedder_, "Sentence-embedder directory (BERT safetensors + vocab)")->capture_default_str();
    build_->add_option("--on-error", on_error_, "Bad corpus input: fail, or skip and count")->check(CLI::IsMember(on_error_names()))->capture_default_str();
    build_->add_option("--hnsw-m", opt_.hnsw.M, "HNSW links per node")->check(CLI::Range(2, 256))->capture_default_str();
    build_->add_option("--ef-construction", opt_.hnsw.ef_construction, "HNSW build candidate list")->check(CLI::Range(8, 4096))->capture_default_str();
    build_->add_option("--ef-search", opt_.hnsw.ef_search, "HNSW search candidate list")->check(CLI::Range(1, 4096))->capture_default_str();
    build_dev_.add_to(build_);

    search_ = app.add_subcommand("search", "Top-k chunks of an index for a query (JSON lines)");
    s_embedder_ = default_embedder_dir();
    search_->add_option("--index", s_index_, "Index directory")->required();
    search_->add_option("--query", s_query_, "Query text")->required();
    search_->add_option("-k", s_k_, "Hits to return")->check(CLI::Range(1, 10000))->capture_default_str();
    search_->add_flag("--exact", s_exact_, "Brute-force search instead of HNSW");
    search_->add_option("--embedder", s_embedder_, "Sentence-embedder directory")->capture_default_str();
    s_dev_.add_to(search_);
  }

  bool selected() const override { return *build_ || *search_; }

  int run() override {
    if (*build_) run_build_index();
    if (*search_) run_search();
    return 0;
  }

 private:
  void run_build_index() {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const std::vector<std::filesystem::path> inputs(corpus_.begin(), corpus_.end());
    const Corpus corpus = load_corpus(inputs, parse_on_error(on_error_));
    for (const auto& p : corpus.skipped) std::fprintf(stderr, "ragkv: skipped %s\n", p.message.c_str());

    GgufFile gguf(model_);
    const auto tok = Tokenizer::from_gguf(gguf);
    auto backend = build_dev_.make_backend();
    Embedder embedder;
    embedder.load(embedder_, *backend);
    opt_.tokenizer_fingerprint = tokenizer_fingerprint(gguf);
    opt_.embedder_fingerprint = embedder.fingerprint();

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
    const IndexManifest m = build_index_dir(out_, corpus.docs, *tok, embed, opt_, progress);
    if (bar) bar->finish();
    const double secs = std::chrono::duration<double>(clock::now() - t0).count();

    nlohmann::json skipped = nlohmann::json::object();
    for (const auto& [kind, n] : corpus.skipped_by_kind()) skipped[kind] = n;
    std::cout << nlohmann::json{{"index", out_}, {"documents", m.n_documents}, {"chunks", m.n_chunks},
                                {"dim", m.dim}, {"skipped", skipped}, {"seconds", secs},
                                {"chunks_per_s", double(m.n_chunks) / secs}, {"index_bytes", dir_bytes(out_)},
                                {"peak_rss_mib", peak_rss_mib()}}
                     .dump()
              << "\n";
  }

  void run_search() {
    auto backend = s_dev_.make_backend();
    Embedder embedder;
    embedder.load(s_embedder_, *backend);
    const IndexDir index = IndexDir::open(s_index_, embedder.fingerprint());
    const std::vector<float> e = embedder.embed({s_query_});
    const auto hits = index.search(e, s_k_, s_exact_);
    for (size_t r = 0; r < hits.size(); ++r) {
      const Chunk& c = index.chunks()[hits[r].chunk];
      std::cout << nlohmann::json{{"rank", r + 1}, {"id", c.id}, {"doc", c.doc}, {"score", hits[r].score}, {"text", c.text}}
                       .dump()
                << "\n";
    }
  }

  CLI::App *build_ = nullptr, *search_ = nullptr;
  std::vector<std::string> corpus_;
  std::string out_, model_, embedder_, on_error_ = "fail";
  IndexBuildOptions opt_;
  DeviceFlags build_dev_;
  std::string s_index_, s_query_, s_embedder_;
  size_t s_k_ = 5;
  bool s_exact_ = false;
  DeviceFlags s_dev_;
};

}  // namespace

std::unique_ptr<CommandFamily> index_commands() { return std::make_unique<IndexCommands>(); }

}  // namespace ragkv::cli
