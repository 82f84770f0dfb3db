// STORE_DIR: chunk-KV files (header + per-layer checksummed K/V, see the header for the layout)
// and store.json.
#include "core/kv-store.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string_view>
#include <vector>

#include "core/checked-file.h"

namespace ragkv {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kMagic{"RKVCHKV\0", 8};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxHeader = 1 << 20;      // a header is a few hundred bytes; refuse absurd lengths
constexpr size_t kPreamble = 8 + 4 + 4;       // magic, version, header_len
constexpr const char* kStoreJson = "store.json";

std::string errno_text() { return std::strerror(errno); }

void append_str(std::string& out, const std::string& s) {
  append_pod(out, uint32_t(s.size()));
  out += s;
}

std::string encode_header(const ChunkKvMeta& m) {
  std::string h;
  append_str(h, m.model_fingerprint);
  append_str(h, m.chunk_id);
  append_str(h, m.prefix);
  for (uint32_t x : {m.n_layer, m.n_kv_head, m.head_dim, m.n_tokens}) append_pod(h, x);
  append_pod(h, m.token_hash);
  append_pod(h, m.first_pos);
  return h;
}

ChunkKvMeta decode_header(const std::string& name, std::string_view bytes) {
  ByteReader r(name, bytes);
  auto str = [&](const char* what) { return std::string(r.bytes(r.pod<uint32_t>(what), what)); };
  ChunkKvMeta m;
  m.model_fingerprint = str("model_fingerprint");
  m.chunk_id = str("chunk_id");
  m.prefix = str("prefix");
  m.n_layer = r.pod<uint32_t>("n_layer");
  m.n_kv_head = r.pod<uint32_t>("n_kv_head");
  m.head_dim = r.pod<uint32_t>("head_dim");
  m.n_tokens = r.pod<uint32_t>("n_tokens");
  m.token_hash = r.pod<uint64_t>("token_hash");
  m.first_pos = r.pod<int32_t>("first_pos");
  r.expect_end();
  return m;
}

// Bytes of one layer's K+V, or nullopt when the shape overflows 64 bits.
std::optional<uint64_t> layer_size(const ChunkKvMeta& m) {
  uint64_t n;
  if (__builtin_mul_overflow(uint64_t(m.n_kv_head), uint64_t(m.head_dim), &n) || n > UINT32_MAX ||
      __builtin_mul_overflow(n, uint64_t(m.n_tokens) * 4, &n))  // K and V, 2 bytes each
    return std::nullopt;
  return n;
}

// Whole file size implied by header_len and the shape (each layer adds its 8-byte checksum).
std::optional<uint64_t> implied_size(const ChunkKvMeta& m, uint32_t header_len) {
  const auto lb = layer_size(m);
  uint64_t data;
  if (!lb || __builtin_mul_overflow(*lb + 8, uint64_t(m.n_layer), &data) || data > UINT64_MAX / 2)
    return std::nullopt;
  return kPreamble + header_len + 8 + data;
}

// Reads up to n bytes at off; returns the count (short only at end of file).
size_t pread_full(int fd, void* buf, size_t n, uint64_t off, const fs::path& path) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, p + got, n - got, off_t(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw CacheFileError(fmt::format("{}: read failed at offset {}: {}", path.string(), off + got, errno_text()));
    }
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

// Like write_file_atomic, with a temporary name unique to this process and call, so that two
// writers (processes or threads) of the same chunk never share one; the last rename wins.
void write_parts_atomic(const fs::path& path, std::span<const std::string_view> parts) {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  const fs::path tmp = path.string() + fmt::format(".tmp.{}.{:x}", ::getpid(), counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp.string(), errno_text());
  auto give_up = [&](const char* what, bool close_fd) {
    const std::string err = errno_text();
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    fail("{}: {} failed: {}", path.string(), what, err);
  };
  for (std::string_view part : parts) {
    for (size_t done = 0; done < part.size();) {
      const ssize_t w = ::write(fd, part.data() + done, part.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) give_up("write", true);
      done += size_t(w);
    }
  }
  if (::fsync(fd) != 0) give_up("fsync", true);
  if (::close(fd) != 0) give_up("close", false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("rename", false);
  const int dfd = ::open(path.parent_path().empty() ? "." : path.parent_path().c_str(),
                         O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // make the rename durable (best effort)
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// What differs between a file's header and the expected one, "" when nothing does.
std::string header_diff(const ChunkKvMeta& got, const ChunkKvMeta& want) {
  std::string d;
  auto add = [&d](const std::string& s) { d += (d.empty() ? "" : "; ") + s; };
  if (got.model_fingerprint != want.model_fingerprint)
    add(fmt::format("written by model {}, expected {}", got.model_fingerprint, want.model_fingerprint));
  if (got.n_layer != want.n_layer || got.n_kv_head != want.n_kv_head || got.head_dim != want.head_dim)
    add(fmt::format("shape {}x{}x{} (n_layer x n_kv_head x head_dim), expected {}x{}x{}", got.n_layer,
                            got.n_kv_head, got.head_dim, want.n_layer, want.n_kv_head, want.head_dim));
  if (got.chunk_id != want.chunk_id) add(fmt::format("holds chunk '{}', expected '{}'", got.chunk_id, want.chunk_id));
  if (got.prefix != want.prefix) add(fmt::format("prefix '{}', expected '{}'", got.prefix, want.prefix));
  if (got.n_tokens != want.n_tokens || got.token_hash != want.token_hash)
    add(fmt::format("holds {} tokens (hash {}), expected {} tokens (hash {})", got.n_tokens,
                            checksum_hex(got.token_hash), want.n_tokens, checksum_hex(want.token_hash)));
  return d;
}

json store_json(const KvStoreInfo& i) {
  return json{{"format", "ragkv-store"},   {"format_version", i.format_version},
              {"model_fingerprint", i.model_fingerprint}, {"model_name", i.model_name},
              {"n_layer", i.n_layer},      {"n_kv_head", i.n_kv_head},
              {"head_dim", i.head_dim},    {"dtype", i.dtype},
              {"prefix", i.prefix}};
}

KvStoreInfo read_store_json(const fs::path& path) {
  KvStoreInfo i;
  try {
    const json j = json::parse(read_file(path));
    if (j.value("format", "") != "ragkv-store") fail("{}: not a ragkv store file", path.string());
    i.format_version = j.at("format_version").get<int>();
    if (i.format_version != 1)
      fail("{}: store format version {}, this build reads version 1", path.string(), i.format_version);
    i.model_fingerprint = j.at("model_fingerprint").get<std::string>();
    i.model_name = j.at("model_name").get<std::string>();
    i.n_layer = j.at("n_layer").get<uint32_t>();
    i.n_kv_head = j.at("n_kv_head").get<uint32_t>();
    i.head_dim = j.at("head_dim").get<uint32_t>();
    i.dtype = j.at("dtype").get<std::string>();
    i.prefix = j.at("prefix").get<std::string>();
  } catch (const json::exception& e) {
    fail("{}: malformed store file: {}", path.string(), e.what());
  }
  return i;
}

void write_store_json(const fs::path& path, const KvStoreInfo& info) {
  std::string text;
  try {
    text = store_json(info).dump(2) + "\n";
  } catch (const json::exception& e) {
    fail("{}: cannot encode: {}", path.string(), e.what());
  }
  write_file_atomic(path, {text});
}

}  // namespace

uint64_t token_ids_hash(std::span<const int32_t> ids) { return checksum64(ids.data(), ids.size_bytes()); }

// ---- chunk files ----

void write_chunk_kv(const fs::path& path, const ChunkKvMeta& meta, std::span<const uint16_t* const> k,
                    std::span<const uint16_t* const> v) {
  if (k.size() != meta.n_layer || v.size() != meta.n_layer)
    fail("{}: {} K and {} V layers given, the chunk has {}", path.string(), k.size(), v.size(), meta.n_layer);
  const auto lb = layer_size(meta);
  if (!lb || !implied_size(meta, 0)) fail("{}: chunk shape too large", path.string());
  const std::string header = encode_header(meta);
  if (header.size() > kMaxHeader) fail("{}: header of {} bytes exceeds {}", path.string(), header.size(), kMaxHeader);

  std::string head(kMagic);
  append_pod(head, kVersion);
  append_pod(head, uint32_t(header.size()));
  head += header;
  append_pod(head, checksum64(head.data(), head.size()));

  const size_t half = size_t(*lb / 2);  // bytes of K (= bytes of V) per layer
  std::vector<uint64_t> sums(meta.n_layer);
  std::vector<std::string_view> parts{head};
  for (size_t l = 0; l < meta.n_layer; ++l) {
    const std::string_view ks(reinterpret_cast<const char*>(k[l]), half), vs(reinterpret_cast<const char*>(v[l]), half);
    Checksum64 c;
    c.update(ks);
    c.update(vs);
    sums[l] = c.digest();
    parts.insert(parts.end(), {ks, vs, std::string_view(reinterpret_cast<const char*>(&sums[l]), 8)});
  }
  write_parts_atomic(path, parts);
}

ChunkKvReader::ChunkKvReader(const fs::path& path, const ChunkKvMeta& expected) : path_(path) {
  const std::string name = path.string();
  auto bad = [&](const std::string& why) { throw CacheFileError(name + ": " + why); };
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) bad(fmt::format("cannot open: {}", errno_text()));
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0) bad(fmt::format("cannot stat: {}", errno_text()));
    file_bytes_ = uint64_t(st.st_size);

    char pre[kPreamble];
    if (file_bytes_ < kPreamble + 8 || pread_full(fd_, pre, kPreamble, 0, path) != kPreamble)
      bad(fmt::format("truncated: {} bytes, too short for a chunk-KV file", file_bytes_));
    if (std::string_view(pre, 8) != kMagic) bad("not a chunk-KV file (bad magic)");
    uint32_t version, header_len;
    std::memcpy(&version, pre + 8, 4);
    std::memcpy(&header_len, pre + 12, 4);
    if (version != kVersion) bad(fmt::format("format version {}, this build reads version {}", version, kVersion));
    if (header_len > kMaxHeader) bad(fmt::format("corrupt: header length {} exceeds {}", header_len, kMaxHeader));
    const uint64_t header_end = kPreamble + header_len + 8;
    if (file_bytes_ < header_end)
      bad(fmt::format("truncated: {} bytes, the header alone needs {}", file_bytes_, header_end));

    std::string head(pre, kPreamble);
    head.resize(header_end);
    if (pread_full(fd_, head.data() + kPreamble, header_len + 8, kPreamble, path) != header_len + 8)
      bad("truncated while reading the header");
    uint64_t stored;
    std::memcpy(&stored, head.data() + kPreamble + header_len, 8);
    const uint64_t computed = checksum64(head.data(), kPreamble + header_len);
    if (stored != computed)
      bad(fmt::format("header checksum mismatch (stored {}, computed {}): the file is corrupt",
                      checksum_hex(stored), checksum_hex(computed)));
    try {
      meta_ = decode_header(name, std::string_view(head).substr(kPreamble, header_len));
    } catch (const Error& e) {  // ByteReader's errors: a header that passed its checksum yet is malformed
      throw CacheFileError(e.what());
    }

    const auto want_size = implied_size(meta_, header_len);
    if (!want_size) bad("corrupt: the header's shape overflows");
    if (file_bytes_ != *want_size)
      bad(fmt::format("{}: {} bytes, the header implies {} ({} layers x {} tokens x kv_dim {})",
                      file_bytes_ < *want_size ? "truncated" : "corrupt", file_bytes_, *want_size, meta_.n_layer,
                      meta_.n_tokens, meta_.kv_dim()));
    if (const std::string diff = header_diff(meta_, expected); !diff.empty()) bad(diff);
    data_offset_ = header_end;
    layer_bytes_ = size_t(*layer_size(meta_));
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

ChunkKvReader::~ChunkKvReader() {
  if (fd_ >= 0) ::close(fd_);
}

ChunkKvReader::ChunkKvReader(ChunkKvReader&& o) noexcept
    : path_(std::move(o.path_)), meta_(std::move(o.meta_)), fd_(std::exchange(o.fd_, -1)),
      data_offset_(o.data_offset_), layer_bytes_(o.layer_bytes_), file_bytes_(o.file_bytes_),
      resident_(std::move(o.resident_)) {}

ChunkKvReader& ChunkKvReader::operator=(ChunkKvReader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    meta_ = std::move(o.meta_);
    fd_ = std::exchange(o.fd_, -1);
    data_offset_ = o.data_offset_;
    layer_bytes_ = o.layer_bytes_;
    file_bytes_ = o.file_bytes_;
    resident_ = std::move(o.resident_);
  }
  return *this;
}

void ChunkKvReader::read_layer(int l, uint16_t* k_out, uint16_t* v_out) const {
  if (fd_ < 0) fail("{}: read_layer on a closed reader", path_.string());
  if (l < 0 || uint32_t(l) >= meta_.n_layer)
    fail("{}: layer {} out of range, the chunk has {}", path_.string(), l, meta_.n_layer);
  const size_t half = layer_bytes_ / 2;
  if (!resident_.empty()) {  // verified when it was kept
    const uint16_t* layer = resident_.data() + size_t(l) * (layer_bytes_ / sizeof(uint16_t));
    std::memcpy(k_out, layer, half);
    std::memcpy(v_out, layer + half / sizeof(uint16_t), half);
    return;
  }
  const uint64_t off = data_offset_ + uint64_t(l) * (layer_bytes_ + 8);
  uint64_t stored = 0;
  if (pread_full(fd_, k_out, half, off, path_) != half || pread_full(fd_, v_out, half, off + half, path_) != half ||
      pread_full(fd_, &stored, 8, off + layer_bytes_, path_) != 8)
    throw CacheFileError(fmt::format("{}: truncated in layer {}", path_.string(), l));
  Checksum64 c;
  c.update(k_out, half);
  c.update(v_out, half);
  if (c.digest() != stored)
    throw CacheFileError(fmt::format("{}: layer {} checksum mismatch (stored {}, computed {}): the file is corrupt",
                                     path_.string(), l, checksum_hex(stored), checksum_hex(c.digest())));
}

void ChunkKvReader::keep_in_memory() {
  if (!resident_.empty()) return;
  const size_t layer_elems = layer_bytes_ / sizeof(uint16_t);  // K then V
  std::vector<uint16_t> all(size_t(meta_.n_layer) * layer_elems);
  for (uint32_t l = 0; l < meta_.n_layer; ++l) {
    uint16_t* layer = all.data() + size_t(l) * layer_elems;
    read_layer(int(l), layer, layer + layer_elems / 2);
  }
  resident_ = std::move(all);
}

void ChunkKvReader::evict_page_cache() const {
  if (fd_ < 0) return;
  ::fdatasync(fd_);  // dirty pages are not dropped
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
}

// ---- the store ----

KvStore KvStore::open_for_write(const fs::path& dir, const KvStoreInfo& info) {
  std::error_code ec;
  fs::create_directories(dir / "kv", ec);
  if (ec) fail("{}: cannot create the store directory: {}", dir.string(), ec.message());
  KvStore s;
  s.dir_ = dir;
  s.info_ = info;
  const fs::path sj = dir / kStoreJson;
  if (fs::exists(sj)) {
    const KvStoreInfo old = read_store_json(sj);
    if (old.model_fingerprint != info.model_fingerprint)
      fail("{}: built for model {} ({}), not for this model ({}); use another --store", dir.string(), old.model_name,
           old.model_fingerprint, info.model_fingerprint);
    if (old.n_layer != info.n_layer || old.n_kv_head != info.n_kv_head || old.head_dim != info.head_dim ||
        old.dtype != info.dtype)
      fail("{}: holds {} {}x{}x{} (n_layer x n_kv_head x head_dim), expected {} {}x{}x{}", sj.string(), old.dtype,
           old.n_layer, old.n_kv_head, old.head_dim, info.dtype, info.n_layer, info.n_kv_head, info.head_dim);
    if (old == info) {
      s.remove_stale_temporaries();
      return s;
    }
  }
  write_store_json(sj, info);
  s.remove_stale_temporaries();
  return s;
}

size_t KvStore::remove_stale_temporaries() const {
  // "<name>.rkv.tmp.<pid>.<hex>": a writer that died mid-write (kill -9) leaves one; a live
  // writer's (another process on this machine) is left alone.
  size_t removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ / "kv", ec)) {
    const std::string name = e.path().filename().string();
    const auto t = name.find(".rkv.tmp.");
    if (t == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + t + 9, nullptr, 10);
    if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      if (fs::remove(e.path(), rm)) ++removed;
    }
  }
  return removed;
}

KvStore KvStore::open_for_read(const fs::path& dir, const std::string& model_fingerprint) {
  if (!fs::is_directory(dir)) fail("{}: no such store directory", dir.string());
  const fs::path sj = dir / kStoreJson;
  if (!fs::exists(sj)) fail("{}: not a store ({} is missing): run precompute first", dir.string(), kStoreJson);
  KvStore s;
  s.dir_ = dir;
  s.info_ = read_store_json(sj);
  s.foreign_ = s.info_.model_fingerprint != model_fingerprint;
  return s;
}

fs::path KvStore::chunk_path(const ChunkKvMeta& m) const {
  Checksum64 c;
  for (const std::string* s : {&m.model_fingerprint, &m.prefix, &m.chunk_id}) {
    const uint64_t n = s->size();  // length-prefixed: no two field lists hash the same bytes
    c.update(&n, 8);
    c.update(*s);
  }
  c.update(&m.token_hash, 8);
  return dir_ / "kv" / (checksum_hex(c.digest()) + ".rkv");
}

bool KvStore::has_valid(const ChunkKvMeta& m) const {
  if (foreign_) return false;
  try {
    ChunkKvReader r(chunk_path(m), m);
    return true;
  } catch (const CacheFileError&) {
    return false;
  }
}

void KvStore::put(const ChunkKvMeta& m, std::span<const uint16_t* const> k, std::span<const uint16_t* const> v) const {
  if (foreign_)
    fail("{}: belongs to model {} ({}), cannot store chunk '{}' of model {}", dir_.string(), info_.model_name,
         info_.model_fingerprint, m.chunk_id, m.model_fingerprint);
  if (m.model_fingerprint != info_.model_fingerprint || m.n_layer != info_.n_layer ||
      m.n_kv_head != info_.n_kv_head || m.head_dim != info_.head_dim)
    fail("{}: chunk '{}' ({} {}x{}x{}) does not match the store ({} {}x{}x{})", dir_.string(), m.chunk_id,
         m.model_fingerprint, m.n_layer, m.n_kv_head, m.head_dim, info_.model_fingerprint, info_.n_layer,
         info_.n_kv_head, info_.head_dim);
  const fs::path p = chunk_path(m);
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  write_chunk_kv(p, m, k, v);
}

std::optional<ChunkKvReader> KvStore::open_chunk(const ChunkKvMeta& m) const {
  if (foreign_) return std::nullopt;
  const fs::path p = chunk_path(m);
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  return ChunkKvReader(p, m);
}

std::pair<size_t, uint64_t> KvStore::usage() const {
  size_t n = 0;
  uint64_t bytes = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_ / "kv", ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".rkv") continue;
    std::error_code fec;
    const auto size = it->file_size(fec);
    if (fec) continue;  // removed meanwhile
    ++n;
    bytes += size;
  }
  return {n, bytes};
}

}  // namespace ragkv
