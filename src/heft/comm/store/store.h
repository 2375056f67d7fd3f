// The rendezvous store: a small key-value service every rank of a job reaches, used to
// exchange addresses, agree on counters and wait for each other before connections exist.
// Implementations: TcpStore (client of TcpStoreServer, tcp_store.h), MemoryStore (one
// process, for tests, memory_store.h) and PrefixStore (a namespace over another store,
// prefix_store.h).
//
// Contract shared by every implementation:
//  - Keys are non-empty byte strings up to 4096 bytes; values up to 64 MiB.
//  - Every method is thread-safe: several communicators of one process share one store.
//  - Every method that may block has a deadline: `timeout` where given, else the store's
//    default (timeout()). Passing the deadline throws heft::Timeout naming the key(s).
//  - A lost connection to the server throws heft::PeerLost (peer -1, op "store <verb>").
// Deliberately left out: watches, compare-and-set, listing keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace heft::comm {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value, replacing an earlier value; wakes every waiter on key.
  virtual void set(const std::string& key, const Bytes& value) = 0;

  // Returns key's value, blocking until some client sets it or `timeout` passes
  // (heft::Timeout).
  virtual Bytes get(const std::string& key, Millis timeout) = 0;
  Bytes get(const std::string& key) { return get(key, timeout()); }

  // Atomically adds delta to the integer stored at key (missing = 0) and returns the new
  // value. A key holding a non-integer value throws heft::InvalidArgument.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // True when every key in keys exists now. Never blocks on the keys.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Removes key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;

  // Blocks until every key in keys exists, or throws heft::Timeout naming the missing ones.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // The default deadline of blocking calls.
  Millis timeout() const { return timeout_; }
  void set_timeout(Millis t) { timeout_ = t; }

  // Convenience for text values.
  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key, Millis timeout) {
    Bytes b = get(key, timeout);
    return std::string(b.begin(), b.end());
  }
  std::string get_string(const std::string& key) { return get_string(key, timeout()); }

 private:
  Millis timeout_{std::chrono::seconds(300)};
};

}  // namespace heft::comm
