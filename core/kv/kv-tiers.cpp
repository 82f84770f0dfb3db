// KvTiers: device and host copies keyed by the store's content address, the store below them,
// and (managed) the knowledge tree's decisions carried out on those copies and files.
#include "core/kv/kv-tiers.h"

#include <algorithm>
#include <filesystem>

#include "core/util/error.h"

namespace ragkv {

namespace fs = std::filesystem;

KvTiers::KvTiers(const KvStore& store) : store_(store) {}

KvTiers::KvTiers(const KvStore& store, const KvTierConfig& config, Backend& backend)
    : store_(store), backend_(&backend), tree_(std::make_unique<KnowledgeTree>(config.policy, config.budgets)) {
  tree_->set_mover(this);
  // Without a disk budget the store's chain files are read as they are, never written nor deleted
  // (another run with a disk budget may own them).
  if (!store_.foreign() && config.budgets.bytes[size_t(KvTier::disk)] > 0) list_chain_files();
}

KvTiers::~KvTiers() {
  if (tree_) tree_->set_mover(nullptr);
}

std::string KvTiers::address(const ChunkKvMeta& key) const { return store_.chunk_path(key).filename().string(); }

std::vector<std::string> KvTiers::tree_path(const ChunkKvMeta& key) {
  std::vector<std::string> path{kPrefixChunkId};
  if (key.chunk_id == kPrefixChunkId && key.context.empty()) return path;
  path.insert(path.end(), key.context.begin(), key.context.end());
  path.push_back(key.chunk_id);
  return path;
}

std::shared_ptr<const SegmentKv> KvTiers::find(const ChunkKvMeta& key) const {
  if (store_.foreign()) return nullptr;
  const std::string a = address(key);
  for (const auto* tier : {&device_, &host_})
    if (const auto it = tier->find(a); it != tier->end()) return it->second;
  std::optional<ChunkKvReader> file = store_.open_chunk(key);
  if (!file) return nullptr;
  return std::make_shared<DiskSegmentKv>(std::move(*file));
}

void KvTiers::place(const ChunkKvMeta& key, KvTier tier, Backend* backend) {
  if (tier == KvTier::disk) return;  // the store holds every cache there already
  auto& held = tier == KvTier::device ? device_ : host_;
  const std::string a = address(key);
  if (held.count(a)) return;
  std::optional<ChunkKvReader> file = store_.open_chunk(key);
  if (!file) fail("{}: no cache of chunk '{}' to place in {} memory", store_.dir().string(), key.chunk_id, kv_tier_name(tier));
  if (tier == KvTier::device) {
    if (!backend) fail("internal: placing chunk '{}' in device memory needs the backend", key.chunk_id);
    held[a] = DeviceSegmentKv::load(*backend, *file);
  } else {
    std::shared_ptr<const HostSegmentKv> host = HostSegmentKv::load(*file);
    if (backend) host->pin_on(*backend);  // uploads straight from it (Backend::pin_host_memory)
    held[a] = std::move(host);
  }
}

void KvTiers::drop(const ChunkKvMeta& key) {
  const std::string a = address(key);
  device_.erase(a);
  host_.erase(a);
  if (!tree_) return;
  const int n = tree_->find(tree_path(key));
  if (n < 0) return;
  tree_->forget(n, KvTier::device);
  if (n < int(tree_->size()) && tree_->node(n).live) tree_->forget(n, KvTier::host);
}

void KvTiers::discard(const ChunkKvMeta& key) {
  drop(key);
  if (!key.exact_chain || store_.foreign()) return;
  if (tree_) {
    const int n = tree_->find(tree_path(key));
    if (n >= 0 && tree_->node(n).live) tree_->forget(n, KvTier::disk);  // releases (deletes) the file
  }
  std::error_code ec;
  fs::remove(store_.chunk_path(key), ec);
}

uint64_t KvTiers::bytes(KvTier tier) const {
  if (tier == KvTier::disk) return 0;
  uint64_t b = 0;
  for (const auto& [a, kv] : tier == KvTier::device ? device_ : host_) b += kv->bytes();
  return b;
}

// The store's chain-node files, oldest first (so LRU-like ties evict the oldest), as disk-held
// tree nodes; a file whose header fails, belongs to another model or is not at its content
// address is counted and left out. Then the disk budget is enforced.
void KvTiers::list_chain_files() {
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  std::error_code ec;
  for (fs::directory_iterator it(store_.dir() / "kv", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.ends_with(".chain.rkv")) continue;
    std::error_code tec;
    files.emplace_back(it->last_write_time(tec), it->path());
  }
  std::sort(files.begin(), files.end());
  const KvStoreInfo& info = store_.info();
  for (const auto& [mtime, path] : files) {
    try {
      const ChunkKvReader r(path);
      const ChunkKvMeta& m = r.meta();
      if (m.model_fingerprint != info.model_fingerprint || m.n_layer != info.n_layer || m.n_kv_head != info.n_kv_head ||
          m.head_dim != info.head_dim || !m.exact_chain || m.context.empty() ||
          store_.chunk_path(m).filename() != path.filename())
        throw CacheFileError(path.string() + ": not a chain node of this store");
      const int n = node_for(m, r.file_bytes());
      tree_->note_on_disk(n, /*pinned=*/false);
    } catch (const CacheFileError&) {
      ++bad_files_;
    }
  }
  tree_->make_room(KvTier::disk, 0);
}

int KvTiers::node_for(const ChunkKvMeta& key, uint64_t bytes) {
  const std::vector<std::string> path = tree_path(key);
  int n = tree_->find(path);
  if (n >= 0 && size_t(n) < node_key_.size() && node_key_[size_t(n)].token_hash != 0) {
    const ChunkKvMeta& old = node_key_[size_t(n)];
    if (old.token_hash != key.token_hash || old.n_tokens != key.n_tokens || old.first_pos != key.first_pos ||
        old.prefix != key.prefix) {
      // The same ids over other tokens (another index): the old node and its subtree go.
      for (KvTier t : {KvTier::device, KvTier::host, KvTier::disk})
        if (tree_->node(n).live) tree_->forget(n, t);
    }
  }
  n = tree_->add(path, key.n_tokens, bytes);
  if (node_key_.size() < tree_->size()) node_key_.resize(tree_->size());
  node_key_[size_t(n)] = key;
  return n;
}

void KvTiers::record_prompt(const std::vector<PromptNode>& nodes, const std::vector<Tensor>& k,
                            const std::vector<Tensor>& v) {
  if (!tree_ || store_.foreign()) return;
  std::vector<NodeUse> uses;
  for (const PromptNode& p : nodes) {
    const ChunkKvMeta& m = p.key;
    const uint64_t bytes = uint64_t(m.n_layer) * m.n_tokens * m.kv_dim() * 2 * sizeof(uint16_t);
    const int n = node_for(m, bytes);
    if (p.served_from == KvTier::disk && !tree_->node(n).in[size_t(KvTier::disk)])
      tree_->note_on_disk(n, /*pinned=*/!m.exact_chain || tree_->budgets().bytes[size_t(KvTier::disk)] == 0);
    if (p.served_from && !tree_->top_tier(n)) continue;  // held outside the tree (explicit placement)
    row_of_[n] = p.row;
    uses.push_back({n, p.served_from, p.cost_per_token, p.admit});
  }
  rows_k_ = &k;
  rows_v_ = &v;
  tree_->record_request(uses);
  rows_k_ = rows_v_ = nullptr;
  row_of_.clear();
}

bool KvTiers::copy(int n, std::optional<KvTier> from, KvTier to) {
  const ChunkKvMeta& key = node_key_.at(size_t(n));
  const std::string a = address(key);
  try {
    std::shared_ptr<const SegmentKv> src;
    std::optional<ChunkKvReader> file;
    int64_t row = 0;
    if (!from) {
      const auto it = row_of_.find(n);
      if (!rows_k_ || it == row_of_.end()) return false;
      row = it->second;
    } else if (*from == KvTier::disk) {
      file = store_.open_chunk(key);
      if (!file) return false;
    } else {
      const auto& held = *from == KvTier::device ? device_ : host_;
      const auto it = held.find(a);
      if (it == held.end()) return false;
      src = it->second;
    }
    switch (to) {
      case KvTier::device:
        device_[a] = !from ? DeviceSegmentKv::from_rows(*backend_, key, *rows_k_, *rows_v_, row)
                     : file ? DeviceSegmentKv::load(*backend_, *file)
                            : DeviceSegmentKv::upload(*backend_, *src);
        return true;
      case KvTier::host: {
        std::shared_ptr<const HostSegmentKv> host =
            !from ? HostSegmentKv::from_rows(*backend_, key, *rows_k_, *rows_v_, row)
            : file ? HostSegmentKv::load(*file)
            : src->tier() == KvTier::device ? HostSegmentKv::download(*backend_, *src)
                                            : std::static_pointer_cast<const HostSegmentKv>(src);
        host->pin_on(*backend_);  // uploads straight from it (Backend::pin_host_memory)
        host_[a] = std::move(host);
        return true;
      }
      case KvTier::disk: {
        if (!key.exact_chain) return false;  // the tiers write chain nodes only
        std::shared_ptr<const SegmentKv> host =
            !from ? HostSegmentKv::from_rows(*backend_, key, *rows_k_, *rows_v_, row)
            : file ? nullptr
            : src->tier() == KvTier::device ? HostSegmentKv::download(*backend_, *src)
                                            : src;
        if (!host) return true;  // already a file
        std::vector<const uint16_t*> kp, vp;
        std::vector<uint16_t> unused;
        for (uint32_t l = 0; l < key.n_layer; ++l) {
          const HostKvLayer layer = host->host_layer(int(l), unused);
          kp.push_back(layer.k);
          vp.push_back(layer.v);
        }
        store_.put(key, kp, vp);
        bytes_written_ += host->bytes();
        return true;
      }
    }
  } catch (const Error& e) {
    if (to == KvTier::disk && write_failures_++ == 0) first_write_error_ = e.what();
    return false;
  }
  return false;
}

void KvTiers::release(int n, KvTier tier) {
  const ChunkKvMeta& key = node_key_.at(size_t(n));
  const std::string a = address(key);
  switch (tier) {
    case KvTier::device: device_.erase(a); break;
    case KvTier::host: host_.erase(a); break;
    case KvTier::disk:
      if (key.exact_chain) {  // never precompute's canonical caches
        std::error_code ec;
        fs::remove(store_.chunk_path(key), ec);
      }
      break;
  }
}

}  // namespace ragkv
