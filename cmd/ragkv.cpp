// ragkv command line: CLI11 subcommands that parse flags, build the pipeline and print results.
// All errors surface here once, as one line on stderr and a non-zero exit (2 for usage errors).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cmd/device-flags.h"
#include "cmd/rag-commands.h"
#include "core/bench-prefill.h"
#include "core/bench-reuse.h"
#include "core/chat-template.h"
#include "core/error.h"
#include "core/generate.h"
#include "core/gguf.h"
#include "core/model.h"
#include "core/paths.h"
#include "core/progress.h"
#include "core/random-model.h"
#include "core/tokenizer.h"
#include "retrieval/corpus.h"
#include "retrieval/embedder.h"
#include "retrieval/index-dir.h"
#include "retrieval/retrieval-bench.h"

namespace {

using ragkv::cli::DeviceFlags;

void run_generate(const std::string& model_path, const std::string& prompt, int max_tokens, bool chat,
                  bool json, const DeviceFlags& dev) {
  auto backend = ragkv::make_backend(dev.device, dev.thread_count());
  ragkv::Model model(model_path, *backend);
  std::string text = prompt;
  if (chat) {
    const auto tpl = ragkv::ChatTemplate::detect(model.gguf());
    if (tpl.name == "none") ragkv::fail("{}: the model has no chat template ragkv knows; drop --chat", model_path);
    text = tpl.wrap(prompt);
  }
  const auto ids = ragkv::tokenize_prompt(model.tokenizer(), text);
  ragkv::GenerateOptions opt;
  opt.max_tokens = max_tokens;
  std::function<void(const std::string&)> stream;
  if (!json) stream = [](const std::string& piece) { std::fwrite(piece.data(), 1, piece.size(), stdout); std::fflush(stdout); };
  const auto r = ragkv::generate_greedy(model, ids, opt, stream);
  if (json) {
    nlohmann::json out = {{"text", r.text}, {"prompt_tokens", r.prompt_ids.size()},
                          {"output_ids", r.output_ids}, {"prefill_ms", r.prefill_ms},
                          {"decode_ms", r.decode_ms}};
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "\n";
    std::fprintf(stderr, "ragkv: %zu prompt tokens in %.1f ms (%.1f tok/s), %zu new tokens in %.1f ms\n",
                 r.prompt_ids.size(), r.prefill_ms, r.prompt_ids.size() / (r.prefill_ms / 1000.0),
                 r.output_ids.size(), r.decode_ms);
  }
}

void run_tokenize(const std::string& model_path, const std::string& text, bool no_special, bool bos) {
  ragkv::GgufFile gguf(model_path);
  auto tok = ragkv::Tokenizer::from_gguf(gguf);
  std::vector<int32_t> ids;
  if (bos && tok->bos_id() >= 0) ids.push_back(tok->bos_id());
  const auto body = tok->encode(text, !no_special);
  ids.insert(ids.end(), body.begin(), body.end());
  std::cout << fmt::format("{}", fmt::join(ids, " ")) << "\n";
}

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

struct BuildIndexArgs {
  std::vector<std::string> corpus;
  std::string out, model = ragkv::default_llm_path(), embedder = ragkv::default_embedder_dir();
  std::string on_error = "fail";
  ragkv::IndexBuildOptions opt;
  DeviceFlags dev;
};

void run_build_index(BuildIndexArgs& a) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::vector<std::filesystem::path> inputs(a.corpus.begin(), a.corpus.end());
  const ragkv::Corpus corpus =
      ragkv::load_corpus(inputs, a.on_error == "skip" ? ragkv::OnError::skip : ragkv::OnError::fail);
  for (const auto& p : corpus.skipped) std::fprintf(stderr, "ragkv: skipped %s\n", p.message.c_str());

  ragkv::GgufFile gguf(a.model);
  const auto tok = ragkv::Tokenizer::from_gguf(gguf);
  auto backend = ragkv::make_backend(a.dev.device, a.dev.thread_count());
  ragkv::Embedder embedder;
  embedder.load(a.embedder, *backend);
  a.opt.tokenizer_fingerprint = ragkv::tokenizer_fingerprint(gguf);
  a.opt.embedder_fingerprint = embedder.fingerprint();

  std::unique_ptr<ragkv::Progress> bar;
  std::string stage;
  const auto progress = [&](std::string_view st, size_t done, size_t total) {
    if (st != stage) {
      if (bar) bar->finish();
      stage = st;
      bar = std::make_unique<ragkv::Progress>("build-index: " + stage, int64_t(total),
                                              st == "chunk" ? "documents" : "chunks");
    }
    bar->set(int64_t(done));
  };
  const auto embed = [&](const std::vector<std::string>& texts) { return embedder.embed(texts); };
  const ragkv::IndexManifest m = ragkv::build_index_dir(a.out, corpus.docs, *tok, embed, a.opt, progress);
  if (bar) bar->finish();
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();

  nlohmann::json skipped = nlohmann::json::object();
  for (const auto& [kind, n] : corpus.skipped_by_kind()) skipped[kind] = n;
  std::cout << nlohmann::json{{"index", a.out}, {"documents", m.n_documents}, {"chunks", m.n_chunks},
                              {"dim", m.dim}, {"skipped", skipped}, {"seconds", secs},
                              {"chunks_per_s", double(m.n_chunks) / secs},
                              {"index_bytes", dir_bytes(a.out)}, {"peak_rss_mib", peak_rss_mib()}}
                   .dump()
            << "\n";
}

void run_search(const std::string& index_dir, const std::string& embedder_dir, const std::string& query,
                size_t k, bool exact, const DeviceFlags& dev) {
  auto backend = ragkv::make_backend(dev.device, dev.thread_count());
  ragkv::Embedder embedder;
  embedder.load(embedder_dir, *backend);
  const ragkv::IndexDir index = ragkv::IndexDir::open(index_dir, embedder.fingerprint());
  const std::vector<float> e = embedder.embed({query});
  const auto hits = index.search(e, k, exact);
  for (size_t r = 0; r < hits.size(); ++r) {
    const ragkv::Chunk& c = index.chunks()[hits[r].chunk];
    std::cout << nlohmann::json{{"rank", r + 1}, {"id", c.id}, {"doc", c.doc}, {"score", hits[r].score},
                                {"text", c.text}}.dump()
              << "\n";
  }
}

}  // namespace

// OpenMP worker threads busy-wait between parallel regions by default; on a shared or
// oversubscribed machine (ctest -j, other jobs) that stalls every region behind descheduled
// spinners (measured: 7 s instead of 0.3 s for a short prefill on a loaded 2-core machine).
// ragkv therefore runs with OMP_WAIT_POLICY=PASSIVE unless the user chose a policy. The runtime
// reads it when it loads, before main, hence the re-exec.
void ensure_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("RAGKV_NO_REEXEC")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  setenv("RAGKV_NO_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

int main(int argc, char** argv) {
  ensure_passive_openmp_wait(argv);
  CLI::App app{"ragkv: retrieval-augmented generation with chunk-KV reuse"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ragkv 0.1.0");

  // generate
  auto* gen = app.add_subcommand("generate", "Greedy completion of a prompt");
  std::string gen_model = ragkv::default_llm_path(), gen_prompt;
  int gen_max = 32;
  bool gen_chat = false, gen_json = false;
  DeviceFlags gen_dev;
  gen->add_option("--model", gen_model, "LLM in GGUF format")->capture_default_str();
  gen->add_option("--prompt", gen_prompt, "Prompt text")->required();
  gen->add_option("--max-tokens", gen_max, "Maximum new tokens")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  gen->add_flag("--chat", gen_chat, "Wrap the prompt in the model's chat template (one user turn)");
  gen->add_flag("--json", gen_json, "Print one JSON object instead of streaming text");
  gen_dev.add_to(gen);

  // tokenize
  auto* tokc = app.add_subcommand("tokenize", "Print the token ids of a text, on one line");
  std::string tok_model = ragkv::default_llm_path(), tok_text;
  bool tok_no_special = false, tok_bos = false;
  tokc->add_option("--model", tok_model, "LLM in GGUF format")->capture_default_str();
  tokc->add_option("--text", tok_text, "Text to tokenize")->required();
  tokc->add_flag("--no-special", tok_no_special, "Treat special-token texts as plain text");
  tokc->add_flag("--bos", tok_bos, "Prepend BOS when the model adds one");

  // build-index
  auto* bidx = app.add_subcommand("build-index", "Chunk and embed a corpus into an HNSW index (INDEX_DIR)");
  BuildIndexArgs bi;
  bidx->add_option("--corpus", bi.corpus, ".txt/.md files or directories, or .jsonl {id,title?,text}")->required();
  bidx->add_option("--out", bi.out, "Index directory to write")->required();
  bidx->add_option("--chunk-tokens", bi.opt.chunking.chunk_tokens, "Chunk length in LLM tokens")->check(CLI::Range(16, 1 << 16))->capture_default_str();
  bidx->add_option("--chunk-overlap", bi.opt.chunking.chunk_overlap, "Tokens shared by consecutive chunks")->check(CLI::NonNegativeNumber)->capture_default_str();
  bidx->add_option("--model", bi.model, "LLM whose tokenizer counts chunk tokens")->capture_default_str();
  bidx->add_option("--embedder", bi.embedder, "Sentence-embedder directory (BERT safetensors + vocab)")->capture_default_str();
  bidx->add_option("--on-error", bi.on_error, "Bad corpus input: fail, or skip and count")->check(CLI::IsMember({"fail", "skip"}))->capture_default_str();
  bidx->add_option("--hnsw-m", bi.opt.hnsw.M, "HNSW links per node")->check(CLI::Range(2, 256))->capture_default_str();
  bidx->add_option("--ef-construction", bi.opt.hnsw.ef_construction, "HNSW build candidate list")->check(CLI::Range(8, 4096))->capture_default_str();
  bidx->add_option("--ef-search", bi.opt.hnsw.ef_search, "HNSW search candidate list")->check(CLI::Range(1, 4096))->capture_default_str();
  bi.dev.add_to(bidx);

  // search
  auto* srch = app.add_subcommand("search", "Top-k chunks of an index for a query (JSON lines)");
  std::string s_index, s_query, s_embedder = ragkv::default_embedder_dir();
  size_t s_k = 5;
  bool s_exact = false;
  DeviceFlags s_dev;
  srch->add_option("--index", s_index, "Index directory")->required();
  srch->add_option("--query", s_query, "Query text")->required();
  srch->add_option("-k", s_k, "Hits to return")->check(CLI::Range(1, 10000))->capture_default_str();
  srch->add_flag("--exact", s_exact, "Brute-force search instead of HNSW");
  srch->add_option("--embedder", s_embedder, "Sentence-embedder directory")->capture_default_str();
  s_dev.add_to(srch);

  // make-test-model
  auto* mtm = app.add_subcommand("make-test-model", "Write a GGUF with random weights of given shapes (tests, benchmarks)");
  ragkv::RandomModelSpec spec;
  std::string mtm_out, mtm_type = "f32";
  mtm->add_option("--out", mtm_out, "Output GGUF path")->required();
  mtm->add_option("--arch", spec.arch, "llama, qwen2 or gemma3")->check(CLI::IsMember({"llama", "qwen2", "gemma3"}))->capture_default_str();
  mtm->add_option("--layers", spec.n_layer, "Transformer layers")->check(CLI::Range(1, 1024))->capture_default_str();
  mtm->add_option("--embd", spec.n_embd, "Embedding width")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  mtm->add_option("--heads", spec.n_head, "Attention heads")->check(CLI::Range(1, 1024))->capture_default_str();
  mtm->add_option("--kv-heads", spec.n_head_kv, "KV heads")->check(CLI::Range(1, 1024))->capture_default_str();
  mtm->add_option("--head-dim", spec.head_dim, "Head size (0: embd / heads)")->check(CLI::Range(0, 1024))->capture_default_str();
  mtm->add_option("--ff", spec.n_ff, "Feed-forward width")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  mtm->add_option("--context", spec.n_ctx, "Context length")->check(CLI::Range(1, 1 << 22))->capture_default_str();
  mtm->add_option("--weight-type", mtm_type, "Projection weight type")->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}))->capture_default_str();
  mtm->add_option("--seed", spec.seed, "Random seed")->capture_default_str();

  // bench
  auto* bench = app.add_subcommand("bench", "Benchmarks (JSON on stdout)");
  bench->require_subcommand(1);
  auto* bprefill = bench->add_subcommand("prefill", "Prefill and decode tokens/s per model");
  std::vector<std::string> bench_models;
  ragkv::PrefillBenchOptions bopt;
  DeviceFlags bench_dev;
  bprefill->add_option("--model", bench_models, "Models (default: the two default LLMs)");
  bprefill->add_option("--tokens", bopt.prompt_tokens, "Prompt length")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  bprefill->add_option("--decode-tokens", bopt.decode_tokens, "Tokens decoded after the prompt")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  bprefill->add_option("--repetitions", bopt.repetitions, "Timed prefills per model")->check(CLI::Range(1, 1000))->capture_default_str();
  bench_dev.add_to(bprefill);
  auto* breuse = bench->add_subcommand("reuse", "TTFT per reuse mode and chunk-KV tier, side by side with full");
  ragkv::ReuseBenchOptions ropt;
  std::vector<std::string> ropt_modes = {"full", "prefix", "reuse", "blend"}, ropt_tiers = {"disk", "page-cache", "host", "device"};
  DeviceFlags breuse_dev;
  breuse->add_option("--model", ropt.model_path, "Model (default: the default LLM)");
  breuse->add_option("--chunks", ropt.chunks, "Chunks in the prompt")->check(CLI::Range(1, 1024))->capture_default_str();
  breuse->add_option("--chunk-tokens", ropt.chunk_tokens, "Tokens per chunk")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  breuse->add_option("--modes", ropt_modes, "Modes, comma-separated (full is always timed: ratios are taken against it)")
      ->delimiter(',')->check(CLI::IsMember({"full", "prefix", "reuse", "blend"}))->capture_default_str();
  breuse->add_option("--tiers", ropt_tiers, "Where chunk KV starts: disk (page cache dropped), page-cache, host (in memory), device (in the backend's memory)")
      ->delimiter(',')->check(CLI::IsMember({"disk", "page-cache", "host", "device"}))->capture_default_str();
  breuse->add_option("--recompute-ratio", ropt.blend.recompute_ratio, "blend: fraction of reused tokens recomputed per layer")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  breuse->add_option("--check-layers", ropt.blend.check_layers, "blend: HKVD selection layers (gradual filtering)")->check(CLI::Range(1, 1024))->capture_default_str();
  breuse->add_option("--repetitions", ropt.repetitions, "Timed prefills per mode and tier, after a warm-up")->check(CLI::Range(1, 1000))->capture_default_str();
  breuse->add_option("--store", ropt.store_dir, "Store for the chunk caches (default: a temporary one, removed afterwards)");
  breuse_dev.add_to(breuse);
  auto* bret = bench->add_subcommand("retrieval", "Recall, gold hit rate, latency and staged-search convergence");
  std::string br_index, br_embedder = ragkv::default_embedder_dir();
  ragkv::RetrievalBenchOptions bropt;
  DeviceFlags br_dev;
  bret->add_option("--index", br_index, "Index directory")->required();
  bret->add_option("--queries", bropt.queries_path, "Queries JSONL with gold_passages")->required();
  bret->add_option("--max-queries", bropt.max_queries, "Queries to run")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  bret->add_option("-k", bropt.k, "Hit rate at k")->check(CLI::Range(1, 1000))->capture_default_str();
  bret->add_option("--embedder", br_embedder, "Sentence-embedder directory")->capture_default_str();
  br_dev.add_to(bret);

  ragkv::cli::RagCommands rag;
  rag.add_to(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (rag.selected()) {
      return rag.run();
    } else if (*gen) {
      run_generate(gen_model, gen_prompt, gen_max, gen_chat, gen_json, gen_dev);
    } else if (*tokc) {
      run_tokenize(tok_model, tok_text, tok_no_special, tok_bos);
    } else if (*bidx) {
      run_build_index(bi);
    } else if (*srch) {
      run_search(s_index, s_embedder, s_query, s_k, s_exact, s_dev);
    } else if (*bret) {
      auto backend = ragkv::make_backend(br_dev.device, br_dev.thread_count());
      ragkv::Embedder embedder;
      embedder.load(br_embedder, *backend);
      const ragkv::IndexDir index = ragkv::IndexDir::open(br_index, embedder.fingerprint());
      std::cout << ragkv::bench_retrieval(index, embedder, bropt).dump(2) << "\n";
    } else if (*mtm) {
      spec.weight_type = mtm_type == "f16"    ? ragkv::GgmlType::F16
                         : mtm_type == "bf16" ? ragkv::GgmlType::BF16
                         : mtm_type == "q8_0" ? ragkv::GgmlType::Q8_0
                                              : ragkv::GgmlType::F32;
      ragkv::write_random_model(spec, mtm_out);
      std::fprintf(stderr, "ragkv: wrote %s\n", mtm_out.c_str());
    } else if (*breuse) {
      if (ropt.model_path.empty()) ropt.model_path = ragkv::default_llm_path();
      ropt.device = breuse_dev.device;
      ropt.threads = breuse_dev.thread_count();
      ropt.modes.clear();
      for (const auto& m : ropt_modes) ropt.modes.push_back(ragkv::parse_reuse_mode(m));
      ropt.tiers.clear();
      for (const auto& t : ropt_tiers) ropt.tiers.push_back(ragkv::parse_kv_tier(t));
      std::cout << ragkv::bench_reuse(ropt).dump(2) << "\n";
    } else if (*bprefill) {
      if (bench_models.empty()) bench_models = {ragkv::default_llm_path(), ragkv::gemma_llm_path()};
      bopt.device = bench_dev.device;
      bopt.threads = bench_dev.thread_count();
      nlohmann::json results = nlohmann::json::array();
      for (const auto& m : bench_models) {
        bopt.model_path = m;
        results.push_back(ragkv::bench_prefill(bopt));
        std::fprintf(stderr, "ragkv bench: %s done\n", m.c_str());
      }
      std::cout << nlohmann::json{{"bench", "prefill"}, {"results", results}}.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ragkv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
