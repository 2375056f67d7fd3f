// MemoryStore: the Store contract (store.h) held in one process's memory, behind one mutex
// and one condition variable. Tests use it as a store without sockets, and TcpStoreServer
// keeps its keys in one (through the non-blocking try_get / missing).
// Deliberately left out: persistence, eviction, per-key locks (one mutex is plenty for a
// rendezvous store's traffic).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "heft/comm/store/store.h"

namespace heft::comm {

class MemoryStore : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // Store's contract. Every method is thread-safe. Keys must be 1..4096 bytes and values
  // at most 64 MiB, else heft::InvalidArgument. get and wait block on a condition variable
  // until the keys appear or the timeout passes (heft::Timeout naming the missing keys).
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  using Store::get;
  using Store::set;
  using Store::wait;

  // key's value if it is set now, else nullopt. Never blocks on the key.
  std::optional<Bytes> try_get(const std::string& key);

  // The keys of `keys` that are not set now, in the order given. Never blocks on the keys.
  std::vector<std::string> missing(const std::vector<std::string>& keys);

 private:
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const;

  std::mutex mu_;
  std::condition_variable changed_;      // notified on every set and add
  std::map<std::string, Bytes> values_;  // guarded by mu_
};

}  // namespace heft::comm
