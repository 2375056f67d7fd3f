#include "heft/comm/transport/tcp/context.h"

#include <poll.h>

#include <future>

#include "heft/check.h"
#include "heft/comm/store/signed_value.h"

namespace heft::comm::tcp {

namespace {

std::string key_of(const std::string& group, int rank) {
  return group + "/tcp/" + std::to_string(rank);
}

}  // namespace

std::unique_ptr<Context> Context::create(Store& store, const std::string& group, int rank,
                                         int size, const std::string& token,
                                         const ContextOptions& options, Deadline deadline) {
  HEFT_CHECK(rank >= 0 && rank < size, "rank ", rank, " of ", size);
  Socket listener = listen_on(options.bind_address, 0);
  const PairIdentity self{group, token, rank,
                          options.bind_address + ":" + std::to_string(local_port(listener))};
  // Signed: whatever store carries it, a peer dials only an address this rank published.
  set_signed(store, token, key_of(group, rank), self.address);

  auto accepted = std::async(std::launch::async, [&] {
    return accept_peers(self, listener, size, deadline);
  });
  std::vector<Pair> pairs(size);
  try {
    for (int peer = 0; peer < rank; ++peer)
      pairs[peer] = connect_pair(
          self, peer, get_signed(store, token, key_of(group, peer), time_left(deadline)), deadline);
  } catch (...) {
    listener.shutdown();  // wakes the accepting thread's poll: it ends at once
    try {
      accepted.get();
    } catch (const Error&) {
    }
    throw;
  }
  std::vector<Pair> higher = accepted.get();
  for (int peer = rank + 1; peer < size; ++peer) pairs[peer] = std::move(higher[peer]);
  for (Pair& p : pairs)
    if (p.connected()) set_buffer_sizes(p.fd(), options.socket_buffer_bytes);
  return std::unique_ptr<Context>(new Context(rank, std::move(pairs)));
}

void Context::check_link(int peer, const std::string& op) {
  pollfd p{pairs_[peer].fd(), POLLRDHUP, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
    throw PeerLost(rank_, peer, op, "its connection closed");
}

void Context::abort() {
  aborted_ = true;
  for (Pair& p : pairs_) p.shutdown();
}

bool Context::progress(Transfer* xs, size_t n, const std::string& op) {
  bool moved = false;
  // Only the first unfinished transfer per (peer, direction) may move: links are FIFO.
  std::vector<uint8_t> busy(pairs_.size() * 2, 0);
  for (size_t i = 0; i < n; ++i) {
    Transfer& t = xs[i];
    if (t.done == t.bytes) continue;
    const bool is_send = t.kind == Transfer::Kind::send;
    uint8_t& slot = busy[t.peer * 2 + (is_send ? 1 : 0)];
    if (slot) continue;
    slot = 1;
    const int fd = pairs_[t.peer].fd();
    auto* base = static_cast<uint8_t*>(t.data);
    try {
      if (is_send) {
        size_t avail = t.limit ? std::min(*t.limit, t.bytes) : t.bytes;
        if (avail <= t.done) continue;
        size_t w = write_some(fd, base + t.done, avail - t.done, op);
        t.done += w;
        moved = moved || w > 0;
      } else {
        size_t r = read_some(fd, base + t.done, t.bytes - t.done, op);
        if (r > 0) {
          t.done += r;
          moved = true;
          if (t.on_progress) t.on_progress(t.done);
        }
      }
    } catch (const ConnectionClosed& e) {
      throw PeerLost(rank_, t.peer, op, aborted_ ? "this rank's communicator was aborted"
                                                 : "connection closed");
    }
  }
  return moved;
}

void Context::throw_timeout(Transfer* xs, size_t n, const std::string& op) {
  for (size_t i = 0; i < n; ++i) {
    const Transfer& t = xs[i];
    if (t.done == t.bytes) continue;
    const bool is_send = t.kind == Transfer::Kind::send;
    throw Timeout("rank " + std::to_string(rank_) + ": " + op + " timed out waiting to " +
                  (is_send ? "send to" : "receive from") + " rank " + std::to_string(t.peer) +
                  " (" + std::to_string(t.done) + " of " + std::to_string(t.bytes) +
                  " bytes moved)", t.peer);
  }
  throw Timeout("rank " + std::to_string(rank_) + ": " + op + " timed out");
}

void Context::exchange(Transfer* xs, size_t n, Deadline deadline, const std::string& op) {
  for (size_t i = 0; i < n; ++i) {
    HEFT_CHECK(xs[i].peer >= 0 && xs[i].peer < size() && xs[i].peer != rank_,
               "transfer peer ", xs[i].peer, " on rank ", rank_, " of ", size());
  }
  std::vector<pollfd> fds;
  for (;;) {
    if (aborted_) throw Error("rank " + std::to_string(rank_) + ": " + op +
                              " on a communicator that was aborted after an earlier error");
    bool moved = progress(xs, n, op);
    bool all_done = true;
    for (size_t i = 0; i < n; ++i) all_done = all_done && xs[i].done == xs[i].bytes;
    if (all_done) return;
    if (moved) continue;
    // Nothing could move: sleep in poll until a link is ready or the deadline.
    fds.clear();
    for (size_t i = 0; i < n; ++i) {
      const Transfer& t = xs[i];
      if (t.done == t.bytes) continue;
      short ev = POLLIN;
      if (t.kind == Transfer::Kind::send) {
        size_t avail = t.limit ? std::min(*t.limit, t.bytes) : t.bytes;
        if (avail <= t.done) continue;
        ev = POLLOUT;
      }
      fds.push_back(pollfd{pairs_[t.peer].fd(), ev, 0});
    }
    int left = millis_left(deadline);
    if (left == 0) throw_timeout(xs, n, op);
    int rc = ::poll(fds.data(), fds.size(), left);
    if (rc == 0) throw_timeout(xs, n, op);
  }
}

}  // namespace heft::comm::tcp
