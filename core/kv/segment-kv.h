// The one KV feed: a verified chunk cache served layer by layer from the tier it lives in
// (RAGCache §4's GPU / host / disk hierarchy; DESIGN.md §4 "Cache management"). Both prefill
// paths, the layer loader and the benchmark take a cached segment's KV only through this
// interface, so a new tier or placement policy plugs in without touching the fusor.
//
//   disk    a ChunkKvReader: every layer read with pread and verified (its XXH64) when asked for
//   host    every layer read and verified once into host memory; served from there, no copy
//   device  every layer read, verified and uploaded once into the backend's memory (GPU memory on
//           CUDA); installed into a prompt's rows by a copy queued with the compute
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/kv/chunk-kv-file.h"

namespace ragkv {

enum class KvTier : uint8_t { device, host, disk };
const char* kv_tier_name(KvTier t);
KvTier parse_kv_tier(const std::string& s);  // Error listing the tiers

// One layer of a segment in host memory: K and V, f16 [n_tokens][kv_dim] each.
struct HostKvLayer {
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
};

class SegmentKv {
 public:
  virtual ~SegmentKv() = default;
  virtual KvTier tier() const = 0;
  const ChunkKvMeta& meta() const { return meta_; }  // as stored (first_pos included)
  size_t layer_bytes() const { return layer_bytes_; }  // K + V of one layer
  uint64_t bytes() const { return uint64_t(layer_bytes_) * meta_.n_layer; }

  // Layer l in host memory (disk and host tiers; the loader thread calls this). The disk tier
  // reads and verifies it into `staging` (resized as needed); the host tier returns its own
  // memory. CacheFileError when the layer fails its checks. Thread-safe.
  virtual HostKvLayer host_layer(int l, std::vector<uint16_t>& staging) const;
  // Layer l in the backend's memory (device tier only): f16 [n_tokens][kv_dim] tensors.
  virtual const Tensor* device_k(int l) const;
  virtual const Tensor* device_v(int l) const;

 protected:
  SegmentKv(ChunkKvMeta meta, size_t layer_bytes) : meta_(std::move(meta)), layer_bytes_(layer_bytes) {}
  ChunkKvMeta meta_;
  size_t layer_bytes_;
};

// The disk tier: the file itself.
class DiskSegmentKv final : public SegmentKv {
 public:
  explicit DiskSegmentKv(ChunkKvReader reader);
  KvTier tier() const override { return KvTier::disk; }
  HostKvLayer host_layer(int l, std::vector<uint16_t>& staging) const override;
  const ChunkKvReader& reader() const { return reader_; }

 private:
  ChunkKvReader reader_;
};

// The host tier: every layer verified once into memory. CacheFileError from load when a layer
// fails its checks (nothing is kept then).
class HostSegmentKv final : public SegmentKv {
 public:
  static std::shared_ptr<const HostSegmentKv> load(const ChunkKvReader& file);
  // From KV already in memory: per layer K then V, f16 [n_tokens][kv_dim] each (meta's shape).
  static std::shared_ptr<const HostSegmentKv> from_data(ChunkKvMeta meta, std::vector<uint16_t> data);
  // A device copy brought back (RAGCache's swap-out to host memory).
  static std::shared_ptr<const HostSegmentKv> download(Backend& backend, const SegmentKv& device);
  // Rows [begin, begin + meta.n_tokens) of a prompt's per-layer K and V tensors.
  static std::shared_ptr<const HostSegmentKv> from_rows(Backend& backend, ChunkKvMeta meta, const std::vector<Tensor>& k,
                                                        const std::vector<Tensor>& v, int64_t begin);
  ~HostSegmentKv() override;
  KvTier tier() const override { return KvTier::host; }
  HostKvLayer host_layer(int l, std::vector<uint16_t>& staging) const override;
  // Offers this segment's memory to `backend` for direct uploads (Backend::pin_host_memory), once;
  // the destructor unpins it, so the segment must go before the backend. Not thread-safe: the
  // thread that holds the tiers calls it.
  void pin_on(Backend& backend) const;

 private:
  HostSegmentKv(ChunkKvMeta meta, size_t layer_bytes, std::vector<uint16_t> data)
      : SegmentKv(std::move(meta), layer_bytes), data_(std::move(data)) {}
  std::vector<uint16_t> data_;  // per layer: K then V, f16 [n_tokens][kv_dim] each
  mutable Backend* pinned_on_ = nullptr;
};

// The device tier: every layer verified and uploaded once into backend memory. The tensors keep
// their storage alive; they must be freed before the backend.
class DeviceSegmentKv final : public SegmentKv {
 public:
  static std::shared_ptr<const DeviceSegmentKv> load(Backend& backend, const ChunkKvReader& file);
  static std::shared_ptr<const DeviceSegmentKv> upload(Backend& backend, const SegmentKv& host);
  // Rows [begin, begin + meta.n_tokens) of a prompt's per-layer K and V tensors, copied on the device.
  static std::shared_ptr<const DeviceSegmentKv> from_rows(Backend& backend, ChunkKvMeta meta,
                                                          const std::vector<Tensor>& k, const std::vector<Tensor>& v,
                                                          int64_t begin);
  KvTier tier() const override { return KvTier::device; }
  const Tensor* device_k(int l) const override { return &k_.at(size_t(l)); }
  const Tensor* device_v(int l) const override { return &v_.at(size_t(l)); }

 private:
  DeviceSegmentKv(ChunkKvMeta meta, size_t layer_bytes) : SegmentKv(std::move(meta), layer_bytes) {}
  std::vector<Tensor> k_, v_;  // per layer f16 [n_tokens][kv_dim], K as stored (at first_pos)
};

}  // namespace ragkv
