// Store inspection: every kv/ file's header, name, model, shape and (verify) layers checked.
#include "core/kv/store-check.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "core/kv/claim-set.h"
#include "core/util/error.h"
#include "core/util/file-io.h"

namespace ragkv {

namespace fs = std::filesystem;

size_t StoreReport::bad() const {
  return size_t(std::count_if(files.begin(), files.end(), [](const StoreFileReport& f) { return !f.problem.empty(); }));
}

KvStore open_store_for_inspection(const fs::path& dir) {
  // store.json names the model; reopening as that model makes nothing foreign.
  const KvStore probe = KvStore::open_for_read(dir, "");
  return KvStore::open_for_read(dir, probe.info().model_fingerprint);
}

StoreReport inspect_store(const KvStore& store, bool every_layer, const std::function<void(size_t, size_t)>& progress) {
  StoreReport rep;
  rep.every_layer = every_layer;
  const fs::path kv = store.dir() / "kv";
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(kv, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.ends_with(".rkv")) {
      names.push_back(name);
    } else if (is_claim_name(name)) {
      const auto claim = inspect_claim(it->path());
      if (claim) (claim->stale() ? rep.stale_claims : rep.claims).push_back(name);
    } else if (temporary_owner(it->path())) {
      if (is_stale_temporary(it->path())) rep.stale_temporaries.push_back(name);
    } else {
      rep.unknown.push_back(name);
    }
  }
  if (ec) fail("{}: cannot list: {}", kv.string(), ec.message());
  std::sort(names.begin(), names.end());
  std::sort(rep.stale_temporaries.begin(), rep.stale_temporaries.end());
  std::sort(rep.unknown.begin(), rep.unknown.end());
  std::sort(rep.claims.begin(), rep.claims.end());
  std::sort(rep.stale_claims.begin(), rep.stale_claims.end());

  const KvStoreInfo& info = store.info();
  for (size_t i = 0; i < names.size(); ++i) {
    StoreFileReport f;
    f.name = names[i];
    const fs::path p = kv / f.name;
    if (const auto stamp = file_stamp(p)) f.stamp = *stamp;
    else f.regular = !fs::exists(fs::symlink_status(p, ec));  // (gone meanwhile: judged as any file)
    f.bytes = f.stamp.size;
    try {
      const ChunkKvReader r = ChunkKvReader::open_any(p);
      const ChunkKvMeta& m = r.meta();
      f.model_fingerprint = m.model_fingerprint;
      f.dtype = r.encoding().name();
      f.n_tokens = m.n_tokens;
      f.variant = !m.context.empty();
      f.prefix = m.chunk_id == "@prefix";
      if (m.model_fingerprint != info.model_fingerprint)
        f.problem = fmt::format("written by model {}, the store is for {} ({})", m.model_fingerprint, info.model_name,
                                info.model_fingerprint);
      else if (m.n_layer != info.n_layer || m.n_kv_head != info.n_kv_head || m.head_dim != info.head_dim)
        f.problem = fmt::format("shape {}x{}x{}, the store's is {}x{}x{} (n_layer x n_kv_head x head_dim)", m.n_layer,
                                m.n_kv_head, m.head_dim, info.n_layer, info.n_kv_head, info.head_dim);
      else if (store.chunk_path(m).filename() != f.name)
        f.problem = fmt::format("holds chunk '{}', whose file is {}: misnamed or moved", m.chunk_id,
                                store.chunk_path(m).filename().string());
      else if (store.key())
        r.check_signature(*store.key());  // every byte, the layers included
      else if (every_layer)
        r.verify_all_layers();
    } catch (const CacheFileError& e) {
      f.problem = e.what();
      // The reader names the whole path; the report is relative to kv/.
      if (const std::string pre = p.string() + ": "; f.problem.starts_with(pre)) f.problem.erase(0, pre.size());
    }
    rep.files.push_back(std::move(f));
    if (progress) progress(i + 1, names.size());
  }
  return rep;
}

namespace {

// Moves entry (a directory, FIFO or link at a cache's name) to STORE/set-aside/, under a name not
// taken there; Error naming both paths when it cannot.
void move_aside(const fs::path& store_dir, const fs::path& entry) {
  const fs::path dir = store_dir / kSetAsideDir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create: {}", dir.string(), ec.message());
  fs::path to = dir / entry.filename();
  for (int n = 1; fs::exists(fs::symlink_status(to, ec)); ++n) to = dir / fmt::format("{}.{}", entry.filename().string(), n);
  fs::rename(entry, to, ec);
  if (ec) fail("{}: cannot move aside to {}: {}", entry.string(), to.string(), ec.message());
  std::fprintf(stderr, "ragkv: store repair: %s is not a regular file: moved to %s\n", entry.c_str(), to.c_str());
}

}  // namespace

size_t remove_bad_files(const KvStore& store, const StoreReport& report) {
  if (!report.every_layer) fail("{}: repair needs a full verification (every layer)", store.dir().string());
  const fs::path kv = store.dir() / "kv";
  size_t removed = 0;
  std::vector<std::pair<std::string, FileStamp>> intact;
  for (const StoreFileReport& f : report.files) {
    const fs::path p = kv / f.name;
    if (!f.regular) {
      move_aside(store.dir(), p);
      ++removed;
      continue;
    }
    if (file_stamp(p) != f.stamp) continue;  // rewritten (or removed) by another process since
    if (f.problem.empty()) {
      intact.emplace_back(f.name, f.stamp);
      continue;
    }
    std::error_code ec;
    if (fs::remove(p, ec)) ++removed;
    else if (ec) fail("{}: cannot remove a bad cache file: {}", p.string(), ec.message());
  }
  for (const std::string& t : report.stale_temporaries) {
    std::error_code ec;
    if (fs::remove(kv / t, ec)) ++removed;
  }
  for (const std::string& c : report.stale_claims) {
    const auto claim = inspect_claim(kv / c);  // (taken over and live again since: kept)
    if (claim && claim->stale() && remove_claim_if_unchanged(kv / c, *claim)) ++removed;
  }
  store.verified_record().rewrite(intact);
  return removed;
}

}  // namespace ragkv
