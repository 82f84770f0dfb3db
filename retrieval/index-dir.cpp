// INDEX_DIR: build (chunk, embed, HNSW, write files, manifest last) and open (verify, load).
// File formats are described in index-dir.h.
#include "retrieval/index-dir.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/util/error.h"
#include "core/format/checked-file.h"
#include "core/format/checksum.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace ragkv {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kChunksFile = "chunks.jsonl";
constexpr const char* kEmbeddingsFile = "embeddings.bin";
constexpr const char* kHnswFile = "hnsw.bin";
constexpr std::string_view kEmbMagic{"RKVEMB\0\0", 8};
constexpr uint32_t kEmbVersion = 1;
constexpr const char* kFormatName = "ragkv-index";

// "gen-<digits>": a generation's folder (build-index --update).
bool is_generation_name(std::string_view s) {
  return s.size() > 4 && s.starts_with("gen-") &&
         std::all_of(s.begin() + 4, s.end(), [](char c) { return c >= '0' && c <= '9'; }) && s.size() <= 4 + 9;
}

json file_entry(const fs::path& path) {
  const std::string bytes = read_file(path);
  return json{
      {"name", path.filename().string()}, {"bytes", bytes.size()}, {"xxh64", checksum_hex(checksum64(bytes))}};
}

// Reads a file the manifest lists and checks its size and checksum; returns its bytes.
std::string read_listed_file(const fs::path& dir, const json& files, const char* key, const char* name) {
  const fs::path path = dir / name;
  if (!files.contains(key)) fail("{}: manifest lists no \"{}\" file", (dir / kManifest).string(), key);
  uint64_t want_bytes = 0;
  std::string want_sum;
  try {
    want_bytes = json_integer<uint64_t>(files.at(key).at("bytes"));
    want_sum = files.at(key).at("xxh64").get<std::string>();
  } catch (const json::exception& e) {
    fail("{}: malformed manifest entry for {}: {}", (dir / kManifest).string(), name, e.what());
  }
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) fail("{}: missing ({}): the index is incomplete, rebuild it", path.string(), ec.message());
  if (size != want_bytes)
    fail("{}: {} bytes, the manifest says {}: the file was changed or truncated, rebuild the index", path.string(),
         size, want_bytes);
  std::string bytes = read_file(path);
  if (checksum_hex(checksum64(bytes)) != want_sum)
    fail("{}: checksum differs from the manifest's: the file is corrupt or from another build, rebuild the index",
         path.string());
  return bytes;
}

std::string chunks_jsonl(const std::vector<Chunk>& chunks) {
  std::string out;
  for (const Chunk& c : chunks) {
    try {
      out += json{{"id", c.id},       {"doc", c.doc},   {"offset", c.offset},
                  {"title", c.title}, {"text", c.text}, {"n_tokens", c.n_tokens}}
                 .dump(-1, ' ', false, json::error_handler_t::strict);
    } catch (const json::exception& e) {
      fail("chunk {}: cannot be written as JSON ({})", c.id, e.what());
    }
    out += '\n';
  }
  return out;
}

std::vector<Chunk> parse_chunks_jsonl(const std::string& name, std::string_view content) {
  std::vector<Chunk> chunks;
  for_each_jsonl_line(content, [&](size_t line_no, std::string_view line) {
    try {
      const json j = json::parse(line);
      Chunk c;
      c.id = j.at("id").get<std::string>();
      c.doc = j.at("doc").get<std::string>();
      c.offset = json_integer<size_t>(j.at("offset"));
      c.title = j.at("title").get<std::string>();
      c.text = j.at("text").get<std::string>();
      c.n_tokens = json_integer<int>(j.at("n_tokens"));
      chunks.push_back(std::move(c));
    } catch (const json::exception& e) {
      fail("{}:{}: not a chunk record {{\"id\",\"doc\",\"offset\",\"title\",\"text\",\"n_tokens\"}}: {}", name,
           line_no, e.what());
    }
  });
  return chunks;
}

json manifest_json(const IndexManifest& m, const fs::path& dir) {
  return json{
      {"format", kFormatName},
      {"format_version", m.format_version},
      {"complete", true},
      {"tokenizer_fingerprint", m.tokenizer_fingerprint},
      {"embedder_fingerprint", m.embedder_fingerprint},
      {"chunking",
       {{"method", chunking_name(m.chunking.chunking)},
        {"chunk_tokens", m.chunking.chunk_tokens},
        {"chunk_overlap", m.chunking.chunk_overlap},
        {"snap_fraction", m.chunking.snap_fraction},
        {"chunk_id", m.chunking.chunking == Chunking::content ? "<doc>#<16 hex of the text>" : "<doc>#<index>"},
        {"embedding_text", "title\\ntext"}}},
      {"counts", {{"documents", m.n_documents}, {"chunks", m.n_chunks}}},
      {"embedding", {{"dim", m.dim}, {"metric", "inner_product"}, {"normalized", true}}},
      {"hnsw",
       {{"M", m.hnsw.M},
        {"ef_construction", m.hnsw.ef_construction},
        {"ef_search", m.hnsw.ef_search},
        {"seed", m.hnsw.seed}}},
      {"files",
       {{"chunks", file_entry(dir / kChunksFile)},
        {"embeddings", file_entry(dir / kEmbeddingsFile)},
        {"hnsw", file_entry(dir / kHnswFile)}}},
  };
}

IndexManifest parse_manifest(const fs::path& path, const json& j) {
  IndexManifest m;
  try {
    if (j.value("format", "") != kFormatName) fail("{}: not a ragkv index manifest", path.string());
    m.format_version = json_integer<int>(j.at("format_version"));
    if (m.format_version != kIndexFormatVersion)
      fail("{}: index format version {}, this build reads version {}: rebuild the index", path.string(),
           m.format_version, kIndexFormatVersion);
    if (!j.value("complete", false)) fail("{}: the build did not complete: rebuild the index", path.string());
    m.tokenizer_fingerprint = j.at("tokenizer_fingerprint").get<std::string>();
    m.embedder_fingerprint = j.at("embedder_fingerprint").get<std::string>();
    const json& c = j.at("chunking");
    m.chunking.chunking = parse_chunking(c.value("method", "fixed"));  // (older indexes name none: fixed)
    m.chunking.chunk_tokens = json_integer<int>(c.at("chunk_tokens"));
    m.chunking.chunk_overlap = json_integer<int>(c.at("chunk_overlap"));
    m.chunking.snap_fraction = c.at("snap_fraction").get<double>();
    m.n_documents = json_integer<size_t>(j.at("counts").at("documents"));
    m.n_chunks = json_integer<size_t>(j.at("counts").at("chunks"));
    m.dim = json_integer<size_t>(j.at("embedding").at("dim"));
    const json& h = j.at("hnsw");
    m.hnsw.M = json_integer<size_t>(h.at("M"));
    m.hnsw.ef_construction = json_integer<size_t>(h.at("ef_construction"));
    m.hnsw.ef_search = json_integer<size_t>(h.at("ef_search"));
    m.hnsw.seed = json_integer<uint64_t>(h.at("seed"));
  } catch (const json::exception& e) {
    fail("{}: malformed manifest: {}", path.string(), e.what());
  }
  return m;
}

}  // namespace

IndexManifest build_index_dir(const fs::path& dir, const std::vector<Document>& docs, const Tokenizer& tok,
                              const EmbedFn& embed, const IndexBuildOptions& opt,
                              const BuildProgressFn& progress) {
  std::function<void(size_t, size_t)> chunk_progress;
  if (progress) chunk_progress = [&](size_t d, size_t t) { progress("chunk", d, t); };
  const std::vector<Chunk> chunks = chunk_corpus(docs, tok, opt.chunking, chunk_progress);
  return write_index_dir(dir, chunks, docs.size(), embed, opt, progress);
}

IndexManifest write_index_dir(const fs::path& dir, const std::vector<Chunk>& chunks, size_t n_documents,
                              const EmbedFn& embed, const IndexBuildOptions& opt,
                              const BuildProgressFn& progress) {
  check_chunk_params(opt.chunking);
  if (chunks.empty()) fail("{}: nothing to index: the corpus gave no chunks", dir.string());
  if (opt.embed_batch == 0) fail("embed_batch must be >= 1");
  if (opt.embedder_fingerprint.empty()) fail("an index needs an embedder fingerprint");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create index directory: {}", dir.string(), ec.message());
  // From here until the new manifest is written, dir holds no index that looks complete.
  fs::remove(dir / kManifest, ec);
  if (ec) fail("{}: cannot remove the old manifest: {}", (dir / kManifest).string(), ec.message());
  for (const auto& e : fs::directory_iterator(dir, ec)) {  // temporaries a killed build left
    const std::string f = e.path().filename().string();
    for (const char* name : {kChunksFile, kEmbeddingsFile, kHnswFile, kManifest})
      if (const auto owner = temporary_owner(e.path());
          (owner && owner->target == name) || f.starts_with(std::string(name) + ".tmp."))  // (older builds' names)
        fs::remove(e.path(), ec);
  }

  // A fresh build at the top level makes any generation written by an update stale.
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && is_generation_name(e.path().filename().string())) fs::remove_all(e.path(), ec);

  const std::string chunk_lines = chunks_jsonl(chunks);
  write_file_atomic(dir / kChunksFile, {chunk_lines});

  // Embed in batches of distinct texts; rows f32 [n][dim], L2-normalised. A text seen before (a
  // repeated boilerplate passage, or the identical windows of a megabyte of '[') takes the row of
  // its first chunk instead of being embedded again: the embedder is a function of the text.
  const size_t n = chunks.size();
  size_t dim = 0;
  std::vector<float> rows;
  std::unordered_map<uint64_t, size_t> first_with_text;  // XXH64 of an embedding text -> first chunk
  std::vector<size_t> source(n);                         // the chunk whose row chunk i copies
  for (size_t b = 0; b < n;) {
    std::vector<std::string> texts;
    std::vector<size_t> embedded;  // chunk of each text
    size_t e = b;
    for (; e < n && texts.size() < opt.embed_batch; ++e) {
      std::string t = chunk_embedding_text(chunks[e]);
      const auto [it, fresh] = first_with_text.emplace(checksum64(t.data(), t.size()), e);
      source[e] = fresh || chunk_embedding_text(chunks[it->second]) != t ? e : it->second;  // (a collision: embed)
      if (source[e] != e) continue;
      texts.push_back(std::move(t));
      embedded.push_back(e);
    }
    std::vector<float> out = texts.empty() ? std::vector<float>() : embed(texts);
    if (!texts.empty() && (out.empty() || out.size() % texts.size() != 0))
      fail("embedder returned {} floats for {} texts (expected texts × dim)", out.size(), texts.size());
    if (!texts.empty()) {
      const size_t d = out.size() / texts.size();
      if (dim == 0) {
        dim = d;
      } else if (d != dim) {
        fail("embedder returned {}-dimensional vectors for chunks {}..{}, {}-dimensional before", d, chunks[b].id,
             chunks[e - 1].id, dim);
      }
    }
    rows.resize(e * dim);
    for (size_t k = 0; k < embedded.size(); ++k) {
      const std::span<float> row(out.data() + k * dim, dim);
      l2_normalize(row, "embedding of chunk " + chunks[embedded[k]].id);
      std::copy(row.begin(), row.end(), rows.begin() + ptrdiff_t(embedded[k] * dim));
    }
    for (size_t i = b; i < e; ++i)
      if (source[i] != i) std::copy_n(rows.begin() + ptrdiff_t(source[i] * dim), dim, rows.begin() + ptrdiff_t(i * dim));
    if (progress) progress("embed", e, n);
    b = e;
  }

  std::string emb_header;
  append_pod(emb_header, uint32_t(dim));
  append_pod(emb_header, uint32_t(opt.embedder_fingerprint.size()));
  append_pod(emb_header, uint64_t(n));
  emb_header += opt.embedder_fingerprint;
  write_checked_file(
      dir / kEmbeddingsFile, kEmbMagic, kEmbVersion,
      {emb_header, std::string_view(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(float))});

  std::function<void(size_t, size_t)> index_progress;
  if (progress) index_progress = [&](size_t d, size_t t) { progress("index", d, t); };
  const auto hnsw = HnswIndex::build(rows, dim, opt.hnsw, index_progress);
  hnsw->save(dir / kHnswFile);

  IndexManifest m;
  m.format_version = kIndexFormatVersion;
  m.tokenizer_fingerprint = opt.tokenizer_fingerprint;
  m.embedder_fingerprint = opt.embedder_fingerprint;
  m.chunking = opt.chunking;
  m.n_documents = n_documents;
  m.n_chunks = n;
  m.dim = dim;
  m.hnsw = opt.hnsw;
  write_file_atomic(dir / kManifest, {manifest_json(m, dir).dump(2) + "\n"});
  return m;
}

IndexUpdate update_index_dir(const fs::path& dir, const std::vector<Document>& docs, const Tokenizer& tok,
                             const EmbedFn& embed, IndexBuildOptions opt, const BuildProgressFn& progress) {
  const IndexDir old = IndexDir::open(dir, opt.embedder_fingerprint);
  IndexUpdate u;
  u.previous_generation = old.generation();
  const int k = u.previous_generation.empty() ? 0 : std::stoi(u.previous_generation.substr(4));
  u.generation = fmt::format("gen-{}", k + 1);
  opt.chunking = old.manifest().chunking;  // the index's own parameters, so unchanged text chunks alike
  opt.hnsw = old.manifest().hnsw;

  std::function<void(size_t, size_t)> chunk_progress;
  if (progress) chunk_progress = [&](size_t d, size_t t) { progress("chunk", d, t); };
  const std::vector<Chunk> chunks = chunk_corpus(docs, tok, opt.chunking, chunk_progress);
  // What the previous index holds: its chunks by id (for the counts) and its rows by embedding text.
  std::unordered_map<std::string, const Chunk*> old_by_id;
  std::unordered_map<std::string, size_t> old_row_of_text;
  const size_t dim = old.manifest().dim;
  for (size_t i = 0; i < old.chunks().size(); ++i) {
    old_by_id.emplace(old.chunks()[i].id, &old.chunks()[i]);
    old_row_of_text.emplace(chunk_embedding_text(old.chunks()[i]), i);
  }
  std::unordered_set<std::string> seen;  // the new chunk ids
  for (const Chunk& c : chunks) {
    const auto it = old_by_id.find(c.id);
    if (it == old_by_id.end()) ++u.added;
    else if (it->second->text == c.text) ++u.unchanged;
    seen.insert(c.id);
  }
  for (const Chunk& c : old.chunks()) u.removed += !seen.count(c.id);

  // The embedder is a function of the text: a text the previous index embedded takes its row.
  const EmbedFn embed_new = [&](const std::vector<std::string>& texts) {
    std::vector<std::string> fresh;
    for (const std::string& t : texts)
      if (!old_row_of_text.count(t)) fresh.push_back(t);
    const std::vector<float> computed = fresh.empty() ? std::vector<float>() : embed(fresh);
    if (!fresh.empty() && computed.size() != fresh.size() * dim)
      fail("embedder returned {} floats for {} texts of dimension {} (the index's)", computed.size(), fresh.size(), dim);
    u.embedded += fresh.size();
    std::vector<float> out(texts.size() * dim);
    size_t next = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto it = old_row_of_text.find(texts[i]);
      const float* row = it != old_row_of_text.end() ? old.embeddings().data() + it->second * dim : computed.data() + dim * next++;
      u.reused_embeddings += it != old_row_of_text.end();
      std::copy_n(row, dim, out.begin() + ptrdiff_t(i * dim));
    }
    return out;
  };
  const fs::path gen_dir = dir / u.generation;
  std::error_code ec;
  fs::remove_all(gen_dir, ec);  // a killed update's leftovers
  u.manifest = write_index_dir(gen_dir, chunks, docs.size(), embed_new, opt, progress);

  // The switch: one rename of the top-level manifest.
  json top = manifest_json(u.manifest, gen_dir);
  top["generation"] = u.generation;
  write_file_atomic(dir / kManifest, {top.dump(2) + "\n"});
  // Generations before the previous one go (their readers, if any, opened them two updates ago).
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && is_generation_name(name) && name != u.generation && name != u.previous_generation)
      fs::remove_all(e.path(), ec);
  }
  if (!u.previous_generation.empty())  // the top-level files of the index's first build
    for (const char* f : {kChunksFile, kEmbeddingsFile, kHnswFile}) fs::remove(dir / f, ec);
  return u;
}

struct IndexDir::Impl {
  fs::path dir;
  std::string generation;
  IndexManifest manifest;
  std::vector<Chunk> chunks;
  std::vector<float> rows;  // f32 [n_chunks][dim], L2-normalised
  std::unique_ptr<HnswIndex> hnsw;
  std::unique_ptr<ExactIndex> exact;
};

IndexDir::IndexDir() : impl_(std::make_unique<Impl>()) {}
IndexDir::IndexDir(IndexDir&&) noexcept = default;
IndexDir& IndexDir::operator=(IndexDir&&) noexcept = default;
IndexDir::~IndexDir() = default;

IndexDir IndexDir::open(const fs::path& dir, std::string_view embedder_fingerprint) {
  const fs::path mpath = dir / kManifest;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("{}: no such index directory", dir.string());
  if (!fs::exists(mpath, ec))
    fail("{}: not a complete index (no {}): build it with `ragkv build-index`, or an interrupted build left it",
         dir.string(), kManifest);
  json j;
  try {
    j = read_json_file(mpath);
  } catch (const Error& e) {
    fail("malformed manifest: {}", e.what());
  }
  IndexDir d;
  Impl& x = *d.impl_;
  x.manifest = parse_manifest(mpath, j);
  x.generation = j.value("generation", "");
  if (!x.generation.empty() && !is_generation_name(x.generation))
    fail("{}: malformed manifest: generation \"{}\" is not gen-<number>", mpath.string(), x.generation);
  const fs::path root = dir;
  const fs::path data = x.generation.empty() ? dir : dir / x.generation;  // where its files are
  x.dir = root;
  const IndexManifest& m = x.manifest;
  // Fingerprints are compared by their content hash, after the last ':' (indexes built before the
  // fingerprint was content-only carry the embedder's folder name before it).
  auto content = [](std::string_view fp) { return fp.substr(fp.rfind(':') + 1); };
  if (!embedder_fingerprint.empty() && content(m.embedder_fingerprint) != content(embedder_fingerprint))
    fail("{}: index built with embedder \"{}\", this run embeds with \"{}\": rebuild the index with this embedder",
         dir.string(), m.embedder_fingerprint, embedder_fingerprint);
  if (!j.contains("files") || !j["files"].is_object())
    fail("{}: malformed manifest: no \"files\"", mpath.string());
  const json& files = j["files"];

  // chunks.jsonl
  const std::string chunk_bytes = read_listed_file(data, files, "chunks", kChunksFile);
  x.chunks = parse_chunks_jsonl((data / kChunksFile).string(), chunk_bytes);
  if (x.chunks.size() != m.n_chunks)
    fail("{}: {} chunks, the manifest says {}", (data / kChunksFile).string(), x.chunks.size(), m.n_chunks);

  // embeddings.bin (its own frame checksum is verified too)
  const fs::path epath = data / kEmbeddingsFile;
  const CheckedFile ef = check_frame(read_listed_file(data, files, "embeddings", kEmbeddingsFile), epath.string(),
                                     kEmbMagic, kEmbVersion);
  ByteReader r(epath.string(), ef.body());
  const auto dim = r.pod<uint32_t>("dim");
  const auto fp_len = r.pod<uint32_t>("fingerprint length");
  const auto n = r.pod<uint64_t>("row count");
  const std::string_view fp = r.bytes(fp_len, "embedder fingerprint");
  if (dim != m.dim || n != m.n_chunks)
    fail("{}: {} rows of dimension {}, the manifest says {} of {}", epath.string(), n, dim, m.n_chunks, m.dim);
  if (fp != m.embedder_fingerprint)
    fail("{}: embedder \"{}\" differs from the manifest's \"{}\"", epath.string(), fp, m.embedder_fingerprint);
  if (dim == 0 || n > r.remaining() / sizeof(float) / dim)
    fail("{}: truncated: {} rows of dimension {} do not fit in {} bytes", epath.string(), n, dim, r.remaining());
  const std::string_view row_bytes = r.bytes(size_t(n) * dim * sizeof(float), "rows");
  r.expect_end();
  x.rows.resize(size_t(n) * dim);
  std::memcpy(x.rows.data(), row_bytes.data(), row_bytes.size());

  // hnsw.bin
  read_listed_file(data, files, "hnsw", kHnswFile);
  x.hnsw = HnswIndex::load(data / kHnswFile, x.rows, dim, m.hnsw.ef_search);
  const HnswParams& hp = x.hnsw->params();
  if (hp.M != m.hnsw.M || hp.ef_construction != std::max(m.hnsw.ef_construction, m.hnsw.M) ||
      hp.seed != m.hnsw.seed)
    fail("{}: HNSW parameters differ from the manifest's", (data / kHnswFile).string());
  x.exact = std::make_unique<ExactIndex>(x.rows, dim);
  return d;
}

const IndexManifest& IndexDir::manifest() const { return impl_->manifest; }
const std::string& IndexDir::generation() const { return impl_->generation; }
std::string IndexDir::tokenizer_mismatch(std::string_view tokenizer_fingerprint) const {
  const std::string& built = impl_->manifest.tokenizer_fingerprint;
  if (built == tokenizer_fingerprint) return "";
  return fmt::format("{}: built with tokenizer {}, this model's is {}: its chunk lengths are in the other model's "
                     "tokens (rebuild it with build-index --model for chunks of --chunk-tokens of this model)",
                     impl_->dir.string(), built, tokenizer_fingerprint);
}
const std::vector<Chunk>& IndexDir::chunks() const { return impl_->chunks; }

std::vector<Chunk> IndexDir::previous_chunks() const {
  const std::string& g = impl_->generation;
  if (g.empty()) return {};
  const int k = std::stoi(g.substr(4));
  const fs::path file = (k <= 1 ? impl_->dir : impl_->dir / fmt::format("gen-{}", k - 1)) / kChunksFile;
  std::error_code ec;
  if (!fs::exists(file, ec)) return {};  // removed by a later update, or never there
  return parse_chunks_jsonl(file.string(), read_regular_file(file));
}
std::span<const float> IndexDir::embeddings() const { return impl_->rows; }
const HnswIndex& IndexDir::hnsw() const { return *impl_->hnsw; }
HnswIndex& IndexDir::hnsw() { return *impl_->hnsw; }
const ExactIndex& IndexDir::exact() const { return *impl_->exact; }

std::vector<Hit> IndexDir::search(std::span<const float> query, size_t k, bool exact) const {
  check_query_dim(query, impl_->manifest.dim);
  std::vector<float> q(query.begin(), query.end());
  l2_normalize(q, "query embedding");
  return exact ? impl_->exact->search(q, k) : impl_->hnsw->search(q, k);
}

StagedSearch IndexDir::staged_search(std::span<const float> query, size_t k) const {
  check_query_dim(query, impl_->manifest.dim);
  std::vector<float> q(query.begin(), query.end());
  l2_normalize(q, "query embedding");
  return impl_->hnsw->staged_search(q, k);
}

}  // namespace ragkv
