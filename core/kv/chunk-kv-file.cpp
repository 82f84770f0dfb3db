// Chunk-KV files: header + per-layer checksummed K/V (see the header for the layout), written
// atomically, read and verified layer by layer.
#include "core/kv/chunk-kv-file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <string_view>
#include <vector>

#include <fmt/ranges.h>

#include "core/format/checked-file.h"
#include "core/util/file-io.h"

namespace ragkv {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic{"RKVCHKV\0", 8};
constexpr std::string_view kSignatureMagic{"RKVSIG1\0", 8};
constexpr uint64_t kSignatureBytes = 8 + 32;  // magic | HMAC-SHA256
constexpr uint32_t kVersionCanonical = 1;  // no context, no stats
constexpr uint32_t kVersionVariant = 2;
constexpr uint32_t kVersionChain = 3;      // a variant with flags: an exact knowledge-tree node
constexpr uint32_t kVersionQuantised = 4;  // version 3's header, then the KV encoding
constexpr uint8_t kFlagExactChain = 1;
constexpr uint8_t kFlagDonor = 2;  // followed by str donor
constexpr uint32_t kMaxHeader = 1 << 20;      // a header is a few hundred bytes; refuse absurd lengths
constexpr size_t kPreamble = 8 + 4 + 4;       // magic, version, header_len

std::string errno_text() { return std::strerror(errno); }

void append_str(std::string& out, const std::string& s) {
  append_pod(out, uint32_t(s.size()));
  out += s;
}

std::string encode_header(const ChunkKvMeta& m, const VariantStats* stats, const KvEncoding& enc) {
  std::string h;
  append_str(h, m.model_fingerprint);
  append_str(h, m.chunk_id);
  append_str(h, m.prefix);
  for (uint32_t x : {m.n_layer, m.n_kv_head, m.head_dim, m.n_tokens}) append_pod(h, x);
  append_pod(h, m.token_hash);
  append_pod(h, m.first_pos);
  if (m.context.empty() && !stats && !m.exact_chain && m.donor.empty() && !enc.quantised()) return h;  // version 1
  append_pod(h, uint32_t(m.context.size()));
  for (const std::string& c : m.context) append_str(h, c);
  append_pod(h, uint8_t(stats ? 1 : 0));
  if (stats) {
    for (float x : {stats->a_bar, stats->b_bar, stats->cci}) append_pod(h, x);
    append_pod(h, uint32_t(stats->inter.size()));
    for (float x : stats->inter) append_pod(h, x);
    append_pod(h, uint32_t(stats->ranked.size()));
    for (uint32_t x : stats->ranked) append_pod(h, x);
  }
  const uint8_t flags = uint8_t((m.exact_chain ? kFlagExactChain : 0) | (m.donor.empty() ? 0 : kFlagDonor));
  if (enc.quantised() || flags) {  // version 3 (and 4): flags, the donor, then (4) the encoding
    append_pod(h, flags);
    if (!m.donor.empty()) append_str(h, m.donor);
  }
  if (enc.quantised()) {
    append_pod(h, uint8_t(enc.bits));
    append_pod(h, enc.k_group);
    append_pod(h, enc.v_group);
  }
  return h;
}

uint32_t header_version(const ChunkKvMeta& m, const VariantStats* stats, const KvEncoding& enc) {
  if (enc.quantised()) return kVersionQuantised;
  if (m.exact_chain || !m.donor.empty()) return kVersionChain;
  return m.context.empty() && !stats ? kVersionCanonical : kVersionVariant;
}

struct DecodedHeader {
  ChunkKvMeta meta;
  std::optional<VariantStats> stats;
  KvEncoding encoding;  // f16 below version 4
};

DecodedHeader decode_header(const std::string& name, std::string_view bytes, uint32_t version) {
  ByteReader r(name, bytes);
  auto str = [&](const char* what) { return std::string(r.bytes(r.pod<uint32_t>(what), what)); };
  DecodedHeader d;
  ChunkKvMeta& m = d.meta;
  m.model_fingerprint = str("model_fingerprint");
  m.chunk_id = str("chunk_id");
  m.prefix = str("prefix");
  m.n_layer = r.pod<uint32_t>("n_layer");
  m.n_kv_head = r.pod<uint32_t>("n_kv_head");
  m.head_dim = r.pod<uint32_t>("head_dim");
  m.n_tokens = r.pod<uint32_t>("n_tokens");
  m.token_hash = r.pod<uint64_t>("token_hash");
  m.first_pos = r.pod<int32_t>("first_pos");
  if (version == kVersionVariant || version == kVersionChain || version == kVersionQuantised) {
    const uint32_t n_ctx = r.pod<uint32_t>("n_context");
    if (n_ctx > r.remaining() / 4) fail("{}: corrupt: {} context chunk ids in a {}-byte header", name, n_ctx, bytes.size());
    for (uint32_t i = 0; i < n_ctx; ++i) m.context.push_back(str("context chunk id"));
    if (r.pod<uint8_t>("has_stats")) {
      VariantStats s;
      s.a_bar = r.pod<float>("a_bar");
      s.b_bar = r.pod<float>("b_bar");
      s.cci = r.pod<float>("cci");
      const uint32_t n = r.pod<uint32_t>("n_inter");
      if (n != n_ctx) fail("{}: corrupt: {} inter-attention values for {} context chunks", name, n, n_ctx);
      for (uint32_t i = 0; i < n; ++i) s.inter.push_back(r.pod<float>("inter"));
      const uint32_t k = r.pod<uint32_t>("n_ranked");
      if (k > m.n_tokens) fail("{}: corrupt: {} ranked tokens in a chunk of {}", name, k, m.n_tokens);
      for (uint32_t i = 0; i < k; ++i) {
        s.ranked.push_back(r.pod<uint32_t>("ranked token"));
        if (s.ranked.back() >= m.n_tokens) fail("{}: corrupt: ranked token {} of {}", name, s.ranked.back(), m.n_tokens);
      }
      d.stats = std::move(s);
    }
    if (version == kVersionChain || version == kVersionQuantised) {
      const uint8_t flags = r.pod<uint8_t>("flags");
      if (flags & ~(kFlagExactChain | kFlagDonor)) fail("{}: corrupt: unknown flags {:#x}", name, flags);
      m.exact_chain = (flags & kFlagExactChain) != 0;
      if (flags & kFlagDonor) {
        m.donor = str("donor");
        if (m.donor.empty() || m.exact_chain) fail("{}: corrupt: a donor cache {}", name, m.donor.empty() ? "naming no donor" : "marked exact");
      }
    }
    if (version == kVersionQuantised) {
      KvEncoding& e = d.encoding;
      e.bits = r.pod<uint8_t>("kv bits");
      e.k_group = r.pod<uint32_t>("k_group");
      e.v_group = r.pod<uint32_t>("v_group");
      if (!e.valid() || !e.quantised())
        fail("{}: corrupt: KV encoding of {} bits in groups of {} (K) and {} (V); this build reads 8 or 4 bits",
             name, e.bits, e.k_group, e.v_group);
    }
  }
  r.expect_end();
  return d;
}

// Bytes of one layer's K+V block in encoding e (f16 by default), or nullopt when the shape
// overflows 64 bits.
std::optional<uint64_t> layer_size(const ChunkKvMeta& m, const KvEncoding& e = {}) {
  uint64_t d;
  if (__builtin_mul_overflow(uint64_t(m.n_kv_head), uint64_t(m.head_dim), &d) || d > UINT32_MAX) return std::nullopt;
  return kv_layer_block_bytes(e, m.n_tokens, d);
}

// Whole file size implied by header_len, the shape and the encoding (each layer adds its 8-byte
// checksum).
std::optional<uint64_t> implied_size(const ChunkKvMeta& m, const KvEncoding& e, uint32_t header_len) {
  const auto lb = layer_size(m, e);
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

// What differs between a file's header and the expected one, "" when nothing does.
std::string header_diff(const ChunkKvMeta& got, const ChunkKvMeta& want, bool any_context) {
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
  if (!any_context && got.context != want.context)
    add(fmt::format("computed after [{}], expected after [{}]", fmt::join(got.context, ","), fmt::join(want.context, ",")));
  if (!any_context && got.exact_chain != want.exact_chain)
    add(got.exact_chain ? "an exact knowledge-tree node, expected a Cache-Craft variant"
                        : "a Cache-Craft variant, expected an exact knowledge-tree node");
  if (got.donor.empty() != want.donor.empty())
    add(got.donor.empty() ? "a computed cache, expected a donor cache" : "a donor cache, expected a computed one");
  return d;
}

}  // namespace

uint64_t token_ids_hash(std::span<const int32_t> ids) { return checksum64(ids.data(), ids.size_bytes()); }

// ---- chunk files ----

namespace {

// Writes parts, followed by the signature trailer when key is given.
void write_signed(const fs::path& path, std::vector<std::string_view> parts, const StoreKey* key) {
  std::string trailer;
  if (key) {
    HmacSha256 mac = key->mac();
    for (std::string_view p : parts) mac.update(p);
    const Sha256Digest d = mac.final();
    trailer = std::string(kSignatureMagic) + std::string(reinterpret_cast<const char*>(d.data()), d.size());
    parts.push_back(trailer);
  }
  write_file_atomic(path, parts);
}

}  // namespace

void write_chunk_kv(const fs::path& path, const ChunkKvMeta& meta, std::span<const uint16_t* const> k,
                    std::span<const uint16_t* const> v, const VariantStats* stats, const KvEncoding& encoding,
                    const StoreKey* key) {
  if (k.size() != meta.n_layer || v.size() != meta.n_layer)
    fail("{}: {} K and {} V layers given, the chunk has {}", path.string(), k.size(), v.size(), meta.n_layer);
  if (!encoding.valid())
    fail("internal: {}: KV encoding of {} bits in groups of {} and {}", path.string(), encoding.bits, encoding.k_group,
         encoding.v_group);
  const auto lb = layer_size(meta);
  if (!lb || !implied_size(meta, encoding, 0)) fail("{}: chunk shape too large", path.string());
  if (meta.exact_chain && meta.context.empty())
    fail("internal: {}: an exact chain node needs a context (depth 1 is the canonical cache)", path.string());
  if (!meta.donor.empty() && (meta.exact_chain || !meta.context.empty() || stats))
    fail("internal: {}: a donor cache is a canonical cache's stand-in (no context, statistics or exact chain)", path.string());
  if (stats && stats->inter.size() != meta.context.size())
    fail("{}: {} inter-attention values for {} context chunks", path.string(), stats->inter.size(), meta.context.size());
  const std::string header = encode_header(meta, stats, encoding);
  if (header.size() > kMaxHeader) fail("{}: header of {} bytes exceeds {}", path.string(), header.size(), kMaxHeader);

  std::string head(kMagic);
  append_pod(head, header_version(meta, stats, encoding));
  append_pod(head, uint32_t(header.size()));
  head += header;
  append_pod(head, checksum64(head.data(), head.size()));

  std::vector<uint64_t> sums(meta.n_layer);
  std::vector<std::string_view> parts{head};
  if (encoding.quantised()) {  // each layer's block quantised, then checksummed as a whole
    const size_t block = size_t(*layer_size(meta, encoding));
    std::vector<uint8_t> blocks(block * meta.n_layer);
    for (size_t l = 0; l < meta.n_layer; ++l) {
      uint8_t* b = blocks.data() + l * block;
      kv_quantise_layer(encoding, k[l], v[l], meta.n_tokens, meta.kv_dim(), b);
      sums[l] = checksum64(b, block);
      parts.insert(parts.end(), {std::string_view(reinterpret_cast<const char*>(b), block),
                                 std::string_view(reinterpret_cast<const char*>(&sums[l]), 8)});
    }
    write_signed(path, std::move(parts), key);
    return;
  }
  const size_t half = size_t(*lb / 2);  // bytes of K (= bytes of V) per layer
  for (size_t l = 0; l < meta.n_layer; ++l) {
    const std::string_view ks(reinterpret_cast<const char*>(k[l]), half), vs(reinterpret_cast<const char*>(v[l]), half);
    Checksum64 c;
    c.update(ks);
    c.update(vs);
    sums[l] = c.digest();
    parts.insert(parts.end(), {ks, vs, std::string_view(reinterpret_cast<const char*>(&sums[l]), 8)});
  }
  write_signed(path, std::move(parts), key);
}

ChunkKvReader::ChunkKvReader(const fs::path& path, const ChunkKvMeta& expected, bool any_context) : path_(path) {
  open(path, &expected, any_context);
}

ChunkKvReader::ChunkKvReader(const fs::path& path) : path_(path) { open(path, nullptr, true); }

ChunkKvReader ChunkKvReader::open_any(const fs::path& path) { return ChunkKvReader(path); }

void ChunkKvReader::open(const fs::path& path, const ChunkKvMeta* expected, bool any_context) {
  const std::string name = path.string();
  auto bad = [&](const std::string& why) { throw CacheFileError(name + ": " + why); };
  std::string why;
  fd_ = open_regular_file(path, O_RDONLY, &why);  // never a FIFO (it would block) or a link out of the store
  if (fd_ < 0) bad(fmt::format("cannot open: {}", why));
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
    if (version < kVersionCanonical || version > kVersionQuantised)
      bad(fmt::format("format version {}, this build reads versions {} to {}", version, kVersionCanonical,
                      kVersionQuantised));
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
      DecodedHeader d = decode_header(name, std::string_view(head).substr(kPreamble, header_len), version);
      meta_ = std::move(d.meta);
      stats_ = std::move(d.stats);
      encoding_ = d.encoding;
    } catch (const Error& e) {  // ByteReader's errors: a header that passed its checksum yet is malformed
      throw CacheFileError(e.what());
    }

    // No model has 0 layers; and a file of 0 layers with a huge layer shape would pass the size
    // check below, then make verify_all_layers allocate gigabytes (found by fuzzing).
    if (meta_.n_layer == 0) bad("corrupt: the header gives the chunk 0 layers");
    const auto want_size = implied_size(meta_, encoding_, header_len);
    if (!want_size) bad("corrupt: the header's shape overflows");
    if (file_bytes_ == *want_size + kSignatureBytes) {  // a signed file: its trailer's magic
      char magic[8];
      if (pread_full(fd_, magic, 8, *want_size, path) != 8 || std::string_view(magic, 8) != kSignatureMagic)
        bad(fmt::format("corrupt: {} bytes after the last layer, and not a signature", kSignatureBytes));
      signed_ = true;
    } else if (file_bytes_ != *want_size)
      bad(fmt::format("{}: {} bytes, the header implies {} ({} layers x {} tokens x kv_dim {})",
                      file_bytes_ < *want_size ? "truncated" : "corrupt", file_bytes_, *want_size, meta_.n_layer,
                      meta_.n_tokens, meta_.kv_dim()));
    if (expected)
      if (const std::string diff = header_diff(meta_, *expected, any_context); !diff.empty()) bad(diff);
    data_offset_ = header_end;
    layer_bytes_ = size_t(*layer_size(meta_));
    block_bytes_ = size_t(*layer_size(meta_, encoding_));
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
    : path_(std::move(o.path_)), meta_(std::move(o.meta_)), stats_(std::move(o.stats_)), encoding_(o.encoding_),
      fd_(std::exchange(o.fd_, -1)), data_offset_(o.data_offset_), layer_bytes_(o.layer_bytes_),
      block_bytes_(o.block_bytes_), file_bytes_(o.file_bytes_), signed_(o.signed_) {}

ChunkKvReader& ChunkKvReader::operator=(ChunkKvReader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    meta_ = std::move(o.meta_);
    stats_ = std::move(o.stats_);
    encoding_ = o.encoding_;
    fd_ = std::exchange(o.fd_, -1);
    data_offset_ = o.data_offset_;
    layer_bytes_ = o.layer_bytes_;
    block_bytes_ = o.block_bytes_;
    file_bytes_ = o.file_bytes_;
    signed_ = o.signed_;
  }
  return *this;
}

void ChunkKvReader::read_block(int l, void* first, void* second) const {
  if (fd_ < 0) fail("{}: read_layer on a closed reader", path_.string());
  if (l < 0 || uint32_t(l) >= meta_.n_layer)
    fail("{}: layer {} out of range, the chunk has {}", path_.string(), l, meta_.n_layer);
  const uint64_t off = data_offset_ + uint64_t(l) * (block_bytes_ + 8);
  const size_t n1 = second ? block_bytes_ / 2 : block_bytes_, n2 = block_bytes_ - n1;
  uint64_t stored = 0;
  if (pread_full(fd_, first, n1, off, path_) != n1 || (second && pread_full(fd_, second, n2, off + n1, path_) != n2) ||
      pread_full(fd_, &stored, 8, off + block_bytes_, path_) != 8)
    throw CacheFileError(fmt::format("{}: truncated in layer {}", path_.string(), l));
  Checksum64 c;
  c.update(first, n1);
  if (second) c.update(second, n2);
  if (c.digest() != stored)
    throw CacheFileError(fmt::format("{}: layer {} checksum mismatch (stored {}, computed {}): the file is corrupt",
                                     path_.string(), l, checksum_hex(stored), checksum_hex(c.digest())));
}

void ChunkKvReader::read_layer(int l, uint16_t* k_out, uint16_t* v_out) const {
  if (!encoding_.quantised()) return read_block(l, k_out, v_out);  // K then V, f16 as stored
  std::vector<uint8_t> block(block_bytes_);  // read and verified, then decoded here (the loader thread)
  read_block(l, block.data());
  kv_dequantise_layer(encoding_, block.data(), meta_.n_tokens, meta_.kv_dim(), k_out, v_out);
}

void ChunkKvReader::check_signature(const StoreKey& key) const {
  const std::string name = path_.string();
  if (!signed_)
    throw CacheFileError(name + ": not signed, and the store is read with a key (--store-key): not used");
  const uint64_t signed_bytes = file_bytes_ - kSignatureBytes;
  HmacSha256 mac = key.mac();
  std::vector<char> buf(size_t(1) << 20);
  for (uint64_t at = 0; at < signed_bytes;) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), signed_bytes - at));
    if (pread_full(fd_, buf.data(), n, at, path_) != n) throw CacheFileError(name + ": truncated while checking its signature");
    mac.update(buf.data(), n);
    at += n;
  }
  Sha256Digest stored{};
  if (pread_full(fd_, reinterpret_cast<char*>(stored.data()), stored.size(), signed_bytes + 8, path_) != stored.size())
    throw CacheFileError(name + ": truncated while reading its signature");
  if (!digests_equal(mac.final(), stored))
    throw CacheFileError(fmt::format("{}: its signature does not match store key {}: signed with another key, or "
                                     "changed after signing; not used", name, key.id()));
}

void ChunkKvReader::verify_all_layers() const {
  std::vector<uint8_t> block(block_bytes_);
  for (int l = 0; l < int(meta_.n_layer); ++l) read_block(l, block.data());
}

void ChunkKvReader::evict_page_cache() const {
  if (fd_ < 0) return;
  ::fdatasync(fd_);  // dirty pages are not dropped
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
}

double ChunkKvReader::resident_fraction() const {
  if (fd_ < 0 || file_bytes_ == 0) return 0.0;
  void* map = ::mmap(nullptr, file_bytes_, PROT_READ, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) return 0.0;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((file_bytes_ + page - 1) / page);
  size_t resident = 0;
  if (::mincore(map, file_bytes_, in_core.data()) == 0)
    for (unsigned char c : in_core) resident += c & 1;
  ::munmap(map, file_bytes_);
  return double(resident) / double(in_core.size());
}

}  // namespace ragkv
