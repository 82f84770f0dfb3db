// Dynamic speculative pipelining's bookkeeping for one query (RAGCache §5.3, Algorithm 2 with
// one worker): each snapshot of a staged search whose top-k differs from the speculation in
// force replaces it. The longest common prefix with the previous speculation is kept (its loads
// go on: in the knowledge tree a segment's KV depends only on the segments before it), the rest
// of the previous speculation is terminated and the new tail started. The last snapshot is the
// final top-k, so the speculation always ends on it; the loads begun for items outside it are
// the wasted work.
//
// Items are the caller's load identities, one per prompt position (e.g. the store address of a
// chunk's knowledge-tree node, which names the chunks before it).
#pragma once
#include <cstddef>
#include <set>
#include <string>
#include <vector>

namespace ragkv {

class SpeculativeLoads {
 public:
  struct Change {
    size_t kept = 0;                  // items of the common prefix, still loading or loaded
    std::vector<size_t> start;        // positions in the new top-k whose loads begin now
    std::vector<std::string> stop;    // items of the previous speculation terminated
  };
  // A snapshot's top-k (a no-op, returning kept = its size, when equal to the speculation in force).
  Change update(const std::vector<std::string>& items);
  // The final top-k: update() with it; the speculation in force is then exactly `items`.
  Change finish(const std::vector<std::string>& items);

  const std::vector<std::string>& current() const { return current_; }
  size_t speculations() const { return speculations_; }  // snapshots that changed the speculation
  size_t started() const { return started_.size(); }    // distinct items whose loads began
  size_t restarts() const { return restarts_; }          // snapshots that terminated loads
  // Items whose loads began but that are not in the final top-k (after finish), in start order.
  std::vector<std::string> wasted() const;

 private:
  std::vector<std::string> current_;
  std::vector<std::string> start_order_;
  std::set<std::string> started_;
  size_t speculations_ = 0, restarts_ = 0;
};

}  // namespace ragkv
