// The flags of the tools around the engine: the index (build-index, search), tokenize, the
// benchmarks, the store's maintenance and make-test-model.
#include "bench/reuse-bench.h"
#include "cmd/flag-table.h"
#include "core/kv/cache-policy.h"

namespace ragkv::cli {

namespace {
using G = FlagGroup;

// Index.
std::vector<Flag> index_flags() {
  return {
      {kBuildIndex, kBuildIndex, 0, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--corpus", o.corpus, ".txt/.md files or directories of them, or .jsonl with {id, title?, text} per line");
       }},
      {kBuildIndex, 0, 0, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--ext", o.ext, "Extensions read as text documents, comma-separated (default .txt,.md; e.g. .txt,.md,.adoc,.rst)")
             ->delimiter(',');
       }},
      {kBuildIndex | kBenchReuse, 0, 0, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--chunk-tokens", o.chunk_tokens, "Tokens per chunk (default: build-index 256, bench reuse 512)")->check(CLI::Range(16, 1 << 20));
       }},
      {kBuildIndex, 0, 0, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--update", o.update, "Bring the index at --out to the corpus: unchanged chunks keep their embeddings, the rest are embedded; readers switch at once");
       }},
      {kBuildIndex, 0, 0, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--chunking", o.chunking, "Chunk boundaries: content-defined cuts named by their text, so edits change only the chunks they touch (the default), or fixed windows named by position")
             ->check(CLI::IsMember({"fixed", "content"}));
       }},
      {kBuildIndex, 0, 0, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--chunk-overlap", o.build.chunking.chunk_overlap, "Tokens shared by consecutive chunks")
             ->check(CLI::NonNegativeNumber)->capture_default_str();
       }},
      {kBuildIndex, 0, kBuildIndex, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--hnsw-m", o.build.hnsw.M, "HNSW links per node")->check(CLI::Range(2, 256))->capture_default_str();
       }},
      {kBuildIndex, 0, kBuildIndex, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--ef-construction", o.build.hnsw.ef_construction, "HNSW candidate list while building")
             ->check(CLI::Range(8, 4096))->capture_default_str();
       }},
      {kBuildIndex, 0, kBuildIndex, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--ef-search", o.build.hnsw.ef_search, "HNSW candidate list while searching")->check(CLI::Range(1, 4096))->capture_default_str();
       }},
      {kSearch, kSearch, 0, G::index, [](CLI::App* a, CliOptions& o) { return a->add_option("--query", o.query, "Query text"); }},
      {kSearch | kBenchRetrieval, 0, 0, G::index, [](CLI::App* a, CliOptions& o) {
         return a->add_option("-k", o.k, "Hits to return (bench retrieval: the hit rate at k)")->check(CLI::Range(1, 10000))->capture_default_str();
       }},
      {kSearch, 0, 0, G::index, [](CLI::App* a, CliOptions& o) { return a->add_flag("--exact", o.exact, "Brute-force search instead of HNSW"); }},
      {kTokenize, kTokenize, 0, G::inputs, [](CLI::App* a, CliOptions& o) { return a->add_option("--text", o.text, "Text to tokenize"); }},
      {kTokenize, 0, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--no-special", o.no_special, "Treat special-token texts as plain text");
       }},
      {kTokenize, 0, 0, G::inputs, [](CLI::App* a, CliOptions& o) { return a->add_flag("--bos", o.bos, "Prepend BOS when the model adds one"); }},
  };
}

// Benchmarks.
std::vector<Flag> bench_flags() {
  return {
      {kBenchPrefill, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--models", o.models, "LLMs to measure, comma-separated (default: the two default LLMs)")->delimiter(',');
       }},
      {kBenchPrefill, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--tokens", o.prefill.prompt_tokens, "Prompt length")->check(CLI::Range(1, 1 << 20))->capture_default_str();
       }},
      {kBenchPrefill, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--decode-tokens", o.prefill.decode_tokens, "Tokens decoded after the prompt")->check(CLI::Range(1, 1 << 16))->capture_default_str();
       }},
      {kBenchPrefill, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--decode-batch", o.prefill.decode_batch, "Sequences decoded together for decode_batch_tokens_per_s (1: skip)")
             ->check(CLI::Range(1, 256))->capture_default_str();
       }},
      {kBenchPrefill | kBenchReuse | kBenchDevice, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--repetitions", o.repetitions,
                              "Timed runs per measurement, after a warm-up (medians reported; bench device: the best)")
             ->check(CLI::Range(1, 1000))->capture_default_str();
       }},
      {kBenchReuse, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--chunks", o.chunks, "Chunks in the prompt")->check(CLI::Range(1, 1024))->capture_default_str();
       }},
      {kBenchReuse, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--tiers", o.tiers, "Where chunk KV starts, comma-separated: disk, page-cache, host, device, remote (default: all; remote with --remote)")
             ->delimiter(',')->check(CLI::IsMember(kv_start_names()));
       }},
      {kBenchRetrieval, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--max-queries", o.max_queries, "Queries to run")->check(CLI::Range(1, 1 << 24))->capture_default_str();
       }},
      {kBenchCache, kBenchCache, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--host-budgets", o.host_budgets, "Host-memory budgets to replay, comma-separated (e.g. 64MiB,1GiB)")
             ->delimiter(',')->transform(CLI::AsSizeValue(false));
       }},
      {kBenchCache, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--policies", o.policies, "Replacement policies, comma-separated (default: all)")
             ->delimiter(',')->check(CLI::IsMember(cache_policy_names()));
       }},
      {kBenchCache, 0, 0, G::bench, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--orders", o.orders, "Orders, comma-separated: input, reorder, freq, reorder+freq (default: all)")
             ->delimiter(',')->check(CLI::IsMember({"input", "reorder", "freq", "reorder+freq"}));
       }},
  };
}

// Store maintenance.
std::vector<Flag> store_flags() {
  return {
      {kStoreGc, 0, 0, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--keep-index", o.keep_index, "Remove every cache of a chunk none of these indexes holds (with --model, the store's)");
       }},
      {kStoreGc, 0, 0, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--max-bytes", o.max_bytes, "Byte budget for the store's cache files (kv/*.rkv)")->check(CLI::NonNegativeNumber);
       }},
      {kStoreGc, 0, 0, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--include-canonical", o.include_canonical, "Also remove canonical chunk caches, least recently used first, when the rest is not enough");
       }},
      {kStoreGc, 0, 0, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--dry-run", o.dry_run, "Report what would be removed; remove nothing");
       }},
  };
}

// make-test-model.
std::vector<Flag> test_model_flags() {
  return {
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--arch", o.spec.arch, "llama, qwen2 or gemma3")->check(CLI::IsMember({"llama", "qwen2", "gemma3"}))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--layers", o.spec.n_layer, "Transformer layers")->check(CLI::Range(1, 1024))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--embd", o.spec.n_embd, "Embedding width")->check(CLI::Range(1, 1 << 16))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--heads", o.spec.n_head, "Attention heads")->check(CLI::Range(1, 1024))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--kv-heads", o.spec.n_head_kv, "KV heads")->check(CLI::Range(1, 1024))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--head-dim", o.spec.head_dim, "Head size (0: embd / heads)")->check(CLI::Range(0, 1024))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--ff", o.spec.n_ff, "Feed-forward width")->check(CLI::Range(1, 1 << 20))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--context", o.spec.n_ctx, "Context length")->check(CLI::Range(1, 1 << 22))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--vocab", o.spec.n_vocab, "Vocabulary size (0: the 262 byte-level tokens; more: filler tokens added)")
             ->check(CLI::Range(0, 1 << 24))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         std::vector<std::string> names;
         for (const auto& [name, type] : test_model_weight_types()) names.push_back(name);
         names.push_back("q4_k_m");
         return a->add_option("--weight-type", o.weight_type, "Projection weight type; q4_k_m mixes Q4_K and Q6_K as llama.cpp's Q4_K_M does")
             ->check(CLI::IsMember(names))->capture_default_str();
       }},
      {kMakeTestModel, 0, 0, G::test_model, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--separate-output", o.spec.separate_output, "Write an output.weight of its own instead of tying the head to token_embd");
       }},
  };
}

}  // namespace

std::vector<Flag> tool_flags() {
  std::vector<Flag> all;
  for (auto part : {index_flags, bench_flags, store_flags, test_model_flags})
    for (Flag& f : part()) all.push_back(std::move(f));
  return all;
}

}  // namespace ragkv::cli
