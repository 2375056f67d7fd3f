#include "heft/error.h"

#include <cstring>

namespace heft {

namespace {
std::string peer_lost_message(int rank, int peer, const std::string& op,
                              const std::string& detail) {
  std::string msg = rank >= 0 ? "rank " + std::to_string(rank) + ": " : std::string();
  msg += peer >= 0 ? "peer rank " + std::to_string(peer) : std::string("a peer");
  msg += " lost during " + op;
  if (!detail.empty()) msg += ": " + detail;
  return msg;
}
}  // namespace

PeerLost::PeerLost(int rank, int peer, const std::string& op, const std::string& detail)
    : Error(peer_lost_message(rank, peer, op, detail)), rank_(rank), peer_(peer), op_(op) {}

std::string errno_string(int err) {
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* s = strerror_r(err, buf, sizeof(buf));
  return std::string(s) + " (errno " + std::to_string(err) + ")";
}

}  // namespace heft
