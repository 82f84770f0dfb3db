// KvStore: STORE_DIR's store.json and the content-addressed chunk files under kv/.
#include "core/kv/kv-store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/format/checksum.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace ragkv {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kStoreJson = "store.json";
constexpr const char* kVerifiedLog = "verified.log";

json store_json(const KvStoreInfo& i) {
  return json{{"format", "ragkv-store"},   {"format_version", i.format_version},
              {"model_fingerprint", i.model_fingerprint}, {"model_name", i.model_name},
              {"n_layer", i.n_layer},      {"n_kv_head", i.n_kv_head},
              {"head_dim", i.head_dim},    {"dtype", i.dtype},
              {"prefix", i.prefix}};
}

KvStoreInfo read_store_json(const fs::path& path) {
  KvStoreInfo i;
  const json j = read_store_json_file(path);
  try {
    if (j.value("format", "") != "ragkv-store") fail("{}: not a ragkv store file", path.string());
    i.format_version = json_integer<int>(j.at("format_version"));
    if (i.format_version != 1 && i.format_version != 2)
      fail("{}: store format version {}, this build reads versions 1 and 2", path.string(), i.format_version);
    i.model_fingerprint = j.at("model_fingerprint").get<std::string>();
    i.model_name = j.at("model_name").get<std::string>();
    i.n_layer = json_integer<uint32_t>(j.at("n_layer"));
    i.n_kv_head = json_integer<uint32_t>(j.at("n_kv_head"));
    i.head_dim = json_integer<uint32_t>(j.at("head_dim"));
    i.dtype = j.at("dtype").get<std::string>();
    i.prefix = j.at("prefix").get<std::string>();
  } catch (const json::exception& e) {
    fail("{}: malformed store file: {}", path.string(), e.what());
  }
  if (i.dtype != "f16" && i.dtype != "q8" && i.dtype != "q4")
    fail("{}: KV dtype '{}', this build reads f16, q8 and q4", path.string(), i.dtype);
  if ((i.format_version == 2) != (i.dtype != "f16"))
    fail("{}: corrupt: store format version {} with KV dtype {}", path.string(), i.format_version, i.dtype);
  return i;
}

// --kv-bits of a dtype, for messages.
int kv_bits_of(const std::string& dtype) { return int(KvEncoding::from_name(dtype).bits); }

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

KvStore KvStore::open_for_write(const fs::path& dir, const KvStoreInfo& wanted) {
  KvStoreInfo info = wanted;
  const fs::path sj = dir / kStoreJson;
  std::optional<KvStoreInfo> old;
  if (fs::exists(sj)) old = read_store_json(sj);
  if (info.dtype.empty()) info.dtype = old ? old->dtype : "f16";  // the store's own encoding
  info.format_version = info.encoding().quantised() ? 2 : 1;
  std::error_code ec;
  fs::create_directories(dir / "kv", ec);
  if (ec || !fs::is_directory(dir / "kv"))
    fail("{}: cannot create the store's kv/ directory: {}", dir.string(), ec ? ec.message() : "a file of that name exists");
  KvStore s;
  s.dir_ = dir;
  s.info_ = info;
  s.verified_ = std::make_shared<VerifiedRecord>(dir / kVerifiedLog);
  if (old) {
    if (old->model_fingerprint != info.model_fingerprint) {
      s.info_ = *old;
      const auto [files, bytes] = s.usage();
      fail("{}: built for model {} ({}), not for this model ({}){}: its {} cache files are not used; pass another "
           "--store to rebuild with precompute (or remove this one)", dir.string(), old->model_name,
           old->model_fingerprint, info.model_fingerprint,
           old->model_name == info.model_name ? " — a file of the same name with other weights, or fingerprinted by a "
                                                "ragkv before fingerprints covered every weight byte"
                                              : "",
           files);
    }
    if (old->n_layer != info.n_layer || old->n_kv_head != info.n_kv_head || old->head_dim != info.head_dim)
      fail("{}: holds {} {}x{}x{} (n_layer x n_kv_head x head_dim), expected {} {}x{}x{}", sj.string(), old->dtype,
           old->n_layer, old->n_kv_head, old->head_dim, info.dtype, info.n_layer, info.n_kv_head, info.head_dim);
    if (old->dtype != info.dtype)
      fail("{}: holds {} KV caches (--kv-bits {}), not {} (--kv-bits {}): a store has one encoding; pass --kv-bits {} "
           "or leave it out, or use another --store",
           dir.string(), old->dtype, kv_bits_of(old->dtype), info.dtype, kv_bits_of(info.dtype), kv_bits_of(old->dtype));
    if (*old == info) {
      s.remove_stale_temporaries();
      return s;
    }
  }
  write_store_json(sj, info);
  s.remove_stale_temporaries();
  return s;
}

size_t KvStore::remove_stale_temporaries() const {
  // A writer killed mid-write (kill -9) leaves "<name>.rkv.ragkv-tmp.<host>.<pid>.<hex>" (or, for
  // a claim being made or taken over, "<name>.rkv.claim.ragkv-tmp…"); only those of dead processes
  // on this machine go (core/util/file-io.h): a live writer's (another process sharing the store),
  // another machine's, and files ragkv did not name are left alone. Claims themselves are taken
  // over by the process that needs the chunk (core/kv/claim-set.h), and counted there.
  size_t removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ / "kv", ec)) {
    const auto owner = temporary_owner(e.path());
    if (!owner || !(owner->target.ends_with(".rkv") || owner->target.ends_with(".rkv.claim")) ||
        !is_stale_temporary(e.path()))
      continue;
    std::error_code rm;
    if (fs::remove(e.path(), rm)) ++removed;
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
  s.verified_ = std::make_shared<VerifiedRecord>(dir / kVerifiedLog);
  s.foreign_ = s.info_.model_fingerprint != model_fingerprint;
  std::error_code ec;
  if (const fs::path kv = dir / "kv"; fs::exists(fs::symlink_status(kv, ec)) && !fs::is_directory(kv, ec))
    std::fprintf(stderr, "ragkv: warning: %s is not a directory: no cache can be read from this store (every chunk is computed)\n",
                 kv.c_str());
  return s;
}

std::string KvStore::chunk_stem(const ChunkKvMeta& m) const {
  Checksum64 c;
  for (const std::string* s : {&m.model_fingerprint, &m.prefix, &m.chunk_id}) {
    const uint64_t n = s->size();  // length-prefixed: no two field lists hash the same bytes
    c.update(&n, 8);
    c.update(*s);
  }
  c.update(&m.token_hash, 8);
  return checksum_hex(c.digest());
}

fs::path KvStore::chunk_path(const ChunkKvMeta& m) const {
  std::string name = chunk_stem(m);
  if (!m.context.empty()) {
    Checksum64 c;
    for (const std::string& id : m.context) {
      const uint64_t n = id.size();
      c.update(&n, 8);
      c.update(id);
    }
    name += '.';  // (not "." + …: GCC 12 warns falsely, -Wrestrict)
    name += checksum_hex(c.digest());
    if (m.exact_chain) name += ".chain";
  } else if (!m.donor.empty()) {
    name += ".donor";
  }
  return dir_ / "kv" / (name + ".rkv");
}

std::vector<ChunkKvReader> KvStore::variants(const ChunkKvMeta& canonical, int* bad) const {
  std::vector<ChunkKvReader> out;
  if (foreign_) return out;
  if (!listed_) {
    std::error_code ec;
    for (fs::directory_iterator it(dir_ / "kv", ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      // <16 hex>.<16 hex>.rkv
      if (name.size() != 16 + 1 + 16 + 4 || name[16] != '.' || !name.ends_with(".rkv")) continue;
      variant_files_[name.substr(0, 16)].push_back(name);
    }
    listed_ = true;
  }
  if (remote_) fetch_remote_variants(canonical);
  const auto it = variant_files_.find(chunk_stem(canonical));
  if (it == variant_files_.end()) return out;
  for (const std::string& name : it->second) {
    std::error_code ec;
    if (!fs::exists(dir_ / "kv" / name, ec)) continue;  // evicted since it was listed
    try {
      ChunkKvReader r = checked(ChunkKvReader(dir_ / "kv" / name, canonical, /*any_context=*/true));
      if (r.meta().context.empty()) throw CacheFileError(name + ": a variant's name on a canonical cache");
      if (chunk_path(r.meta()).filename() != name) throw CacheFileError(name + ": its name does not match its context");
      out.push_back(std::move(r));
    } catch (const CacheFileError&) {
      if (bad) ++*bad;
    }
  }
  return out;
}

bool KvStore::has_valid(const ChunkKvMeta& m) const {
  if (foreign_) return false;
  const fs::path p = chunk_path(m);
  auto before = file_stamp(p);
  if (!before && fetch_remote(m, p, false)) before = file_stamp(p);
  if (!before) return false;
  try {
    ChunkKvReader r(p, m);
    if (key_) {  // every byte signed by this store's writers: the layers' checksums were theirs
      r.check_signature(*key_);
      return true;
    }
    if (verified_->verified(p, *before)) return true;
    r.verify_all_layers();
    if (file_stamp(p) == before) verified_->add(p, *before);  // (not when replaced meanwhile)
    return true;
  } catch (const CacheFileError&) {
    return false;
  }
}

void KvStore::put(const ChunkKvMeta& m, std::span<const uint16_t* const> k, std::span<const uint16_t* const> v,
                  const VariantStats* stats) const {
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
  if (const auto st = fs::symlink_status(p, ec); fs::exists(st) && !fs::is_regular_file(st))
    fail("{}: not a regular file stands at this cache's name: `ragkv store repair --store {}` moves it aside",
         p.string(), dir_.string());
  write_chunk_kv(p, m, k, v, stats, encoding_for(m), key_.get());
  if (const auto stamp = file_stamp(p)) verified_->add(p, *stamp);  // its checksums were just computed from k and v
  if (listed_ && !m.context.empty()) {
    auto& names = variant_files_[chunk_stem(m)];
    const std::string name = p.filename().string();
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  if (remote_ && !m.exact_chain) {  // write-through: the remote tier gets the file's own bytes
    const std::string name = p.filename().string();
    if (remote_->set(remote_key(name), read_regular_file(p)) && !m.context.empty())
      remote_->add_member(remote_key("variants:" + chunk_stem(m)), name);
  }
}

std::string KvStore::remote_key(const std::string& file_name) const { return "ragkv:" + info_.dtype + ":" + file_name; }

bool KvStore::fetch_remote(const ChunkKvMeta& m, const fs::path& p, bool any_context) const {
  if (!remote_ || foreign_ || m.exact_chain) return false;
  const std::string name = p.filename().string();
  const std::optional<std::string> value = remote_->get(remote_key(name));
  if (!value) return false;
  // Written beside its name, checked there as a local file is, then renamed into place: a reader
  // of the store sees no file or a verified one.
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = temporary_path(p, long(getpid()), counter++);
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);  // a node's first cache: kv/ may not exist yet
  std::string why;
  const int fd = open_regular_file(tmp, O_WRONLY | O_CREAT | O_EXCL, &why);
  if (fd < 0) {
    std::fprintf(stderr, "ragkv: warning: %s: %s: the remote tier's copy is not installed\n", tmp.c_str(), why.c_str());
    return false;
  }
  const bool written = write_all(fd, *value) && ::fsync(fd) == 0;
  ::close(fd);
  try {
    if (!written) throw CacheFileError(tmp.string() + ": cannot write it");
    {
      ChunkKvReader r = checked(ChunkKvReader(tmp, m, any_context));
      if (chunk_path(r.meta()).filename() != name) throw CacheFileError("another chunk's cache under this name");
      if (!key_) r.verify_all_layers();  // (with a key the signature covered every byte)
    }
    fs::rename(tmp, p, ec);
    if (ec) throw CacheFileError(p.string() + ": cannot install it: " + ec.message());
  } catch (const CacheFileError& e) {
    fs::remove(tmp, ec);
    remote_->count_bad(remote_key(name), e.what());
    return false;
  }
  if (const auto stamp = file_stamp(p)) verified_->add(p, *stamp);
  return true;
}

void KvStore::fetch_remote_variants(const ChunkKvMeta& canonical) const {
  const std::string stem = chunk_stem(canonical);
  if (!remote_variants_asked_.insert(stem).second) return;
  auto& local = variant_files_[stem];
  for (const std::string& name : remote_->members(remote_key("variants:" + stem))) {
    // <this chunk's 16 hex>.<16 hex>.rkv, not yet here
    if (name.size() != 16 + 1 + 16 + 4 || !name.starts_with(stem) || name[16] != '.' || !name.ends_with(".rkv") ||
        name.find('/') != std::string::npos || std::find(local.begin(), local.end(), name) != local.end())
      continue;
    if (fetch_remote(canonical, dir_ / "kv" / name, /*any_context=*/true)) local.push_back(name);
  }
}

KvEncoding KvStore::encoding_for(const ChunkKvMeta& m) const {
  if (m.chunk_id == kPrefixChunkId || m.exact_chain) return KvEncoding{};
  return info_.encoding();
}

uint64_t KvStore::kv_bytes(const ChunkKvMeta& m) const {
  const auto b = kv_layer_block_bytes(encoding_for(m), m.n_tokens, m.kv_dim());
  return b ? *b * m.n_layer : 0;
}

std::optional<ChunkKvReader> KvStore::open_chunk(const ChunkKvMeta& m) const {
  if (foreign_) return std::nullopt;
  const fs::path p = chunk_path(m);
  std::error_code ec;
  if (!fs::exists(p, ec) && !fetch_remote(m, p, false)) return std::nullopt;
  return checked(ChunkKvReader(p, m));
}

ChunkKvReader KvStore::checked(ChunkKvReader r) const {
  if (key_) r.check_signature(*key_);
  return r;
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
