// The TCP store: TcpStoreServer holds the keys in one process (the launcher, `heft run`);
// TcpStore is the client every worker holds. Every connection is authenticated with the job
// token (auth.h: HMAC challenge, token never sent); a client with a wrong token is refused
// and the refusal logged with its address. Wire format: docs/store-protocol.md.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "heft/comm/store/store.h"

namespace heft::comm {

struct TcpStoreServerOptions {
  // Address to bind. Default loopback: nothing beyond this machine can connect. Use a
  // host's own address (never 0.0.0.0 unless asked) for multi-host jobs.
  std::string bind_address = "127.0.0.1";
  // 0 picks a free port; port() tells which.
  int port = 0;
  // The job token every client must prove it knows. Must be non-empty.
  std::string token;
  // Memory the stored keys and values may take: those one connection wrote and still owns
  // (a key belongs to its last writer), and all of them together. A SET or ADD that would go
  // over is refused with heft::InvalidArgument naming the limit; nothing is stored.
  size_t max_client_bytes = size_t{256} << 20;
  size_t max_total_bytes = size_t{1} << 30;
};

// Serves the store on a background thread until destroyed. Thread-safe.
class TcpStoreServer {
 public:
  // Binds and starts serving; throws heft::IoError naming the address if binding fails,
  // heft::InvalidArgument on an empty token.
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();  // stops the thread and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  const std::string& address() const;
  // Connections refused for a bad token so far (for tests and logs).
  int refused_connections() const;
  // The value of `key` now, read in this process without a client (the launcher reads what
  // workers recorded); nothing when unset. Never blocks on the key.
  std::optional<std::string> peek(const std::string& key) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Client. Connects (retrying until `connect_timeout` while the server is not up yet) and
// authenticates in the constructor: a wrong token throws heft::Error ("store at H:P refused
// the job token"), an unreachable server heft::Timeout. Methods are thread-safe (one
// request at a time on the single connection).
class TcpStore : public Store {
 public:
  TcpStore(const std::string& host, int port, const std::string& token,
           Millis connect_timeout = std::chrono::seconds(60));
  ~TcpStore() override;

  // "host:port" -> TcpStore; throws heft::InvalidArgument on a malformed address.
  static std::unique_ptr<TcpStore> connect(const std::string& host_port,
                                           const std::string& token,
                                           Millis connect_timeout = std::chrono::seconds(60));

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  using Store::get;
  using Store::set;
  using Store::wait;

  // The local address of the connection to the server: the interface that reaches the
  // job's network, used by transports to decide where to listen.
  std::string local_address() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace heft::comm
