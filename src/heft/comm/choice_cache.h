// A machine's record of the allreduce forms its communicators chose by measurement
// (allreduce_choice.cc: hierarchical or the flat ring across hosts; on one host, the
// shared-memory step of a small allreduce: small or direct), so that every run of a job
// on the same machine and world takes the same form for every call, and sums in the same
// order: the first run measures and records, later runs (a resumed one too) read.
//
// One text file, one line per decision: "<fingerprint>\t<size bucket>\t<form name>".
// The fingerprint names what the decision depends on (world, hosts and their ranks, the
// machine, the options that shape the forms); the bucket is the power-of-two size class
// (floor(log2(bytes))). The first decision recorded for a key stays: record_choice() never
// overwrites, so two runs that measured at once both end up with the one recorded first.
// Writes are atomic (a temporary file renamed over the old one, under an flock), so a
// reader never sees half a file. Only rank 0 of a communicator reads or writes it; the
// others get rank 0's decisions through a collective, so ranks with different homes agree.
//
// Deliberately left out: expiry (delete the file to measure again), locking across NFS
// clients.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace heft::comm {

constexpr int kSizeBuckets = 64;

// The power-of-two size class of `bytes`: floor(log2(bytes)), 0 for 0.
inline int size_bucket(size_t bytes) { return bytes ? 63 - __builtin_clzll(bytes) : 0; }

// Where the decisions live: HEFT_ALLREDUCE_CACHE when set ("off": nowhere, returns ""),
// else $HEFT_HOME/comm/allreduce-forms, else ~/.heft/comm/allreduce-forms.
std::string choice_cache_path();

// The names a kind of decision records: a value is its name's index. Empty: the allreduce
// algorithms (Algorithm's names, a value static_cast<int>(Algorithm)).
using FormNames = std::vector<std::string>;

// The decisions recorded in `path` for `fingerprint`: by size bucket, the value (see
// FormNames) or -1 when none is recorded. A missing file reads as none; malformed lines and
// names outside `names` are skipped. Throws heft::IoError when the file exists but cannot be
// read.
std::array<int, kSizeBuckets> read_choices(const std::string& path, const std::string& fingerprint,
                                           const FormNames& names = {});

// Records `choice` for (fingerprint, bucket) unless one is recorded already, and returns the
// decision recorded now (the earlier one, when there was one). Creates the directory.
// Throws heft::IoError when the file cannot be written.
int record_choice(const std::string& path, const std::string& fingerprint, int bucket, int choice,
                  const FormNames& names = {});

// This machine, for fingerprints: "<hostname> <CPU model> <online CPUs>".
std::string machine_description();

}  // namespace heft::comm
