// A rank's flight recorder of its collectives: the last kTraceEntries operations of one
// communicator (sequence number in issue order, operation text, state, times, the peer a
// timed-out operation waited for), kept in a file mapped into memory so another process can
// read it while the rank runs, hangs or after it died. `heft diagnose` and the supervisor read
// every rank's file (profile/diagnosis.h) and say who is behind, in which collective.
//
// On disk (native byte order, one file per rank and communicator, fixed size):
//   TraceFile { char magic[8] = "HEFTTRC1"; int32 rank, size, world_rank, pid;
//               char group[96]; uint64 issued; TraceEntry entries[kTraceEntries]; }
//   TraceEntry { uint64 seq; double queued_at, started_at, ended_at (Unix seconds, 0 = not
//                yet); int32 state (TraceState); int32 peer (-1 = unknown); char op[96]; }
// Entry i holds sequence number s where (s - 1) % kTraceEntries == i; seq 0 = empty.
// Writers are the communicator's threads, ordered by its mutex; a reader may see an entry
// half written and must treat the file as a best-effort snapshot.
//
// Deliberately left out: collectives' contents, history beyond the ring.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace heft::comm {

constexpr int kTraceEntries = 64;

enum class TraceState : int32_t { kEmpty = 0, kQueued = 1, kRunning = 2, kDone = 3, kFailed = 4 };

struct TraceEntry {
  uint64_t seq;
  double queued_at;
  double started_at;
  double ended_at;
  int32_t state;
  int32_t peer;
  char op[96];
};

struct TraceFile {
  char magic[8];
  int32_t rank;
  int32_t size;
  int32_t world_rank;
  int32_t pid;
  char group[96];
  uint64_t issued;
  TraceEntry entries[kTraceEntries];
};

inline constexpr char kTraceMagic[8] = {'H', 'E', 'F', 'T', 'T', 'R', 'C', '1'};

// Writes one communicator's trace. Not thread-safe: the communicator calls it under its
// mutex or from the thread that owns the operation.
class CollectiveTrace {
 public:
  // Maps <dir>/rank-<world_rank>.<group with '/' as '+'>.trace (created, truncated). Returns
  // nullptr when `dir` is empty; throws heft::IoError when the file cannot be made.
  static std::unique_ptr<CollectiveTrace> open(const std::string& dir, const std::string& group,
                                               int rank, int size, int world_rank);
  // HEFT_TRACE_DIR (set by the job supervisor), or "" when tracing is off.
  static std::string dir_from_env();
  ~CollectiveTrace();
  CollectiveTrace(const CollectiveTrace&) = delete;
  CollectiveTrace& operator=(const CollectiveTrace&) = delete;

  // A collective was issued: returns its sequence number (1, 2, ...).
  uint64_t queued(const std::string& op);
  void started(uint64_t seq);
  // peer: the rank a timed-out operation waited for, else -1.
  void ended(uint64_t seq, bool ok, int peer = -1);
  const std::string& path() const { return path_; }

 private:
  CollectiveTrace(std::string path, TraceFile* file) : path_(std::move(path)), file_(file) {}
  TraceEntry* entry(uint64_t seq);
  std::string path_;
  TraceFile* file_;
};

// The current time as Unix seconds (what the trace stores).
double trace_clock();

}  // namespace heft::comm
