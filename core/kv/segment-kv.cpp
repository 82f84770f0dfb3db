// The three tiers of a cached segment's KV: file reads, verified host memory, backend memory.
#include "core/kv/segment-kv.h"

#include "core/util/enum-names.h"
#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr EnumNames<KvTier, 3> kTierNames{{{
    {KvTier::device, "device"},
    {KvTier::host, "host"},
    {KvTier::disk, "disk"},
}}};
}  // namespace

const char* kv_tier_name(KvTier t) { return kTierNames.name(t); }
KvTier parse_kv_tier(const std::string& s) { return kTierNames.parse(s, "KV tier"); }

HostKvLayer SegmentKv::host_layer(int, std::vector<uint16_t>&) const {
  fail("internal: chunk '{}' is in {} memory, not readable on the host", meta_.chunk_id, kv_tier_name(tier()));
}
const Tensor* SegmentKv::device_k(int) const {
  fail("internal: chunk '{}' is not in device memory ({} tier)", meta_.chunk_id, kv_tier_name(tier()));
}
const Tensor* SegmentKv::device_v(int l) const { return device_k(l); }

DiskSegmentKv::DiskSegmentKv(ChunkKvReader reader)
    : SegmentKv(reader.meta(), reader.layer_bytes()), reader_(std::move(reader)) {}

HostKvLayer DiskSegmentKv::host_layer(int l, std::vector<uint16_t>& staging) const {
  const size_t elems = layer_bytes_ / sizeof(uint16_t);
  staging.resize(elems);
  reader_.read_layer(l, staging.data(), staging.data() + elems / 2);
  return {staging.data(), staging.data() + elems / 2};
}

std::shared_ptr<const HostSegmentKv> HostSegmentKv::load(const ChunkKvReader& file) {
  const size_t elems = file.layer_bytes() / sizeof(uint16_t);  // K then V
  std::vector<uint16_t> all(size_t(file.meta().n_layer) * elems);
  for (uint32_t l = 0; l < file.meta().n_layer; ++l) {
    uint16_t* layer = all.data() + size_t(l) * elems;
    file.read_layer(int(l), layer, layer + elems / 2);
  }
  return std::shared_ptr<const HostSegmentKv>(new HostSegmentKv(file.meta(), file.layer_bytes(), std::move(all)));
}

HostSegmentKv::~HostSegmentKv() {
  if (pinned_on_) pinned_on_->unpin_host_memory(data_.data());
}

void HostSegmentKv::pin_on(Backend& backend) const {
  if (pinned_on_ || data_.empty()) return;
  backend.pin_host_memory(data_.data(), data_.size() * sizeof(uint16_t));
  pinned_on_ = &backend;
}

HostKvLayer HostSegmentKv::host_layer(int l, std::vector<uint16_t>&) const {
  if (l < 0 || uint32_t(l) >= meta_.n_layer)
    fail("internal: layer {} of chunk '{}' out of range, it has {}", l, meta_.chunk_id, meta_.n_layer);
  const size_t elems = layer_bytes_ / sizeof(uint16_t);
  const uint16_t* layer = data_.data() + size_t(l) * elems;
  return {layer, layer + elems / 2};
}

std::shared_ptr<const DeviceSegmentKv> DeviceSegmentKv::load(Backend& backend, const ChunkKvReader& file) {
  const ChunkKvMeta& m = file.meta();
  std::shared_ptr<DeviceSegmentKv> r(new DeviceSegmentKv(m, file.layer_bytes()));
  std::vector<uint16_t> layer(file.layer_bytes() / sizeof(uint16_t));
  const size_t half = layer.size() / 2;
  for (uint32_t l = 0; l < m.n_layer; ++l) {
    file.read_layer(int(l), layer.data(), layer.data() + half);
    r->k_.push_back(backend.alloc(DType::f16, m.n_tokens, m.kv_dim()));
    r->v_.push_back(backend.alloc(DType::f16, m.n_tokens, m.kv_dim()));
    backend.upload(r->k_.back(), layer.data());
    backend.upload(r->v_.back(), layer.data() + half);
  }
  return r;
}

}  // namespace ragkv

namespace ragkv {

namespace {
size_t layer_bytes_of(const ChunkKvMeta& m) { return size_t(m.n_tokens) * m.kv_dim() * 2 * sizeof(uint16_t); }
}  // namespace

std::shared_ptr<const HostSegmentKv> HostSegmentKv::from_data(ChunkKvMeta meta, std::vector<uint16_t> data) {
  const size_t lb = layer_bytes_of(meta);
  if (data.size() * sizeof(uint16_t) != lb * meta.n_layer)
    fail("internal: {} KV values for chunk '{}' of {} layers x {} bytes", data.size(), meta.chunk_id, meta.n_layer, lb);
  return std::shared_ptr<const HostSegmentKv>(new HostSegmentKv(std::move(meta), lb, std::move(data)));
}

std::shared_ptr<const HostSegmentKv> HostSegmentKv::download(Backend& backend, const SegmentKv& device) {
  const ChunkKvMeta& m = device.meta();
  const size_t elems = device.layer_bytes() / sizeof(uint16_t);
  std::vector<uint16_t> all(size_t(m.n_layer) * elems);
  for (uint32_t l = 0; l < m.n_layer; ++l) {
    uint16_t* layer = all.data() + size_t(l) * elems;
    backend.download(*device.device_k(int(l)), layer);
    backend.download(*device.device_v(int(l)), layer + elems / 2);
  }
  return from_data(m, std::move(all));
}

std::shared_ptr<const HostSegmentKv> HostSegmentKv::from_rows(Backend& backend, ChunkKvMeta meta,
                                                              const std::vector<Tensor>& k, const std::vector<Tensor>& v,
                                                              int64_t begin) {
  const size_t elems = layer_bytes_of(meta) / sizeof(uint16_t);
  std::vector<uint16_t> all(size_t(meta.n_layer) * elems);
  for (uint32_t l = 0; l < meta.n_layer; ++l) {
    uint16_t* layer = all.data() + size_t(l) * elems;
    backend.download(k.at(l).slice_rows(begin, meta.n_tokens), layer);
    backend.download(v.at(l).slice_rows(begin, meta.n_tokens), layer + elems / 2);
  }
  return from_data(std::move(meta), std::move(all));
}

std::shared_ptr<const DeviceSegmentKv> DeviceSegmentKv::upload(Backend& backend, const SegmentKv& host) {
  const ChunkKvMeta& m = host.meta();
  std::shared_ptr<DeviceSegmentKv> r(new DeviceSegmentKv(m, host.layer_bytes()));
  std::vector<uint16_t> staging;
  for (uint32_t l = 0; l < m.n_layer; ++l) {
    const HostKvLayer layer = host.host_layer(int(l), staging);
    r->k_.push_back(backend.alloc(DType::f16, m.n_tokens, m.kv_dim()));
    r->v_.push_back(backend.alloc(DType::f16, m.n_tokens, m.kv_dim()));
    backend.upload(r->k_.back(), layer.k);
    backend.upload(r->v_.back(), layer.v);
  }
  return r;
}

std::shared_ptr<const DeviceSegmentKv> DeviceSegmentKv::from_rows(Backend& backend, ChunkKvMeta meta,
                                                                  const std::vector<Tensor>& k,
                                                                  const std::vector<Tensor>& v, int64_t begin) {
  const size_t lb = layer_bytes_of(meta);
  std::shared_ptr<DeviceSegmentKv> r(new DeviceSegmentKv(std::move(meta), lb));
  const ChunkKvMeta& m = r->meta();
  for (uint32_t l = 0; l < m.n_layer; ++l) {
    r->k_.push_back(backend.alloc(DType::f16, m.n_tokens, m.kv_dim()));
    r->v_.push_back(backend.alloc(DType::f16, m.n_tokens, m.kv_dim()));
    backend.copy(k.at(l).slice_rows(begin, m.n_tokens), r->k_.back());
    backend.copy(v.at(l).slice_rows(begin, m.n_tokens), r->v_.back());
  }
  return r;
}

}  // namespace ragkv
