// heft's error types. The policy is in docs/errors.md; in short:
//  - runtime failures throw a subclass of heft::Error whose message names the rank and the
//    operation (PeerLost, Timeout, IoError, InvalidArgument);
//  - broken invariants are HEFT_CHECK failures (check.h), also heft::Error, on in release;
//  - expected failures in user-facing layers (bad spec, missing job) are values, not throws.
// Deliberately left out: error codes, errno-style globals.
#pragma once

#include <stdexcept>
#include <string>

namespace heft {

// Base of every error heft throws. what() is the whole product text.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// A caller passed a value outside the documented contract (a bad count, an unknown dtype).
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& msg) : Error(msg) {}
};

// An operation did not finish before its deadline. The message names the operation, the
// rank and, where known, the peer waited on.
class Timeout : public Error {
 public:
  // peer: the rank waited on when the deadline passed (-1 when none or unknown).
  explicit Timeout(const std::string& msg, int peer = -1) : Error(msg), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

// An operating-system call failed (socket, file, shared memory); the message has errno's text.
class IoError : public Error {
 public:
  explicit IoError(const std::string& msg) : Error(msg) {}
};

// A peer process died or closed its connection. Every rank of the group raises it, not only
// the neighbours of the lost peer: rank() is who raises, peer() the rank that was lost
// (-1 when unknown), op() the operation in flight.
class PeerLost : public Error {
 public:
  PeerLost(int rank, int peer, const std::string& op, const std::string& detail);
  int rank() const { return rank_; }
  int peer() const { return peer_; }
  const std::string& op() const { return op_; }

 private:
  int rank_;
  int peer_;
  std::string op_;
};

// "strerror(errno)" as a std::string, thread-safe.
std::string errno_string(int err);

}  // namespace heft
