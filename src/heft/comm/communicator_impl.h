// Communicator::Impl: what stands behind the communicator's public calls (communicator.h).
// Internal to comm/: only the communicator's own files include it (communicator.cc: set-up
// and the collectives; communicator_queue.cc: the operation queue, its thread and failures;
// allreduce_choice.cc: which allreduce form runs, measured across hosts). Users, tests
// included, go through communicator.h.
//
// Threads: the fields marked "comm thread" are touched only by whichever thread runs the
// current operation (the communicator's own thread, or a caller running a blocking call
// inline while `busy_` keeps the thread out); the ones marked "mu_" only under mu_; the
// atomics are read by any caller. The identity (group, rank, size, options, topology) and the
// transports are set once at construction.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "heft/comm/algo/shm_links.h"
#include "heft/comm/allreduce_plan.h"
#include "heft/comm/choice_cache.h"
#include "heft/comm/communicator.h"
#include "heft/comm/trace.h"
#include "heft/comm/transport/shm/context.h"
#include "heft/comm/transport/transport.h"

namespace heft::comm {

// The shared memory of ranks that share a core (CommunicatorOptions::shm_core_group,
// algo/hierarchical_allreduce.h core_grouped_allreduce), set up with the host's context:
// `core` among the ranks of this rank's core (null when alone on it), `leaders` among the
// cores' first ranks (null off them); *_ranks: their communicator ranks by local index.
struct ShmCores {
  std::unique_ptr<shm::Context> core, leaders;
  std::vector<int> core_ranks, leader_ranks;
  // Bytes of large allreduces since the first ranks last measured their placement (the
  // first call measures), and its answer: far, the core-grouped form runs; near, the flat
  // forms (they move more bytes across cores, which near costs less than the core-grouped
  // form's extra passes on each core).
  uint64_t bytes_since_probe = UINT64_MAX;
  bool far = false;
  // The host's ranks are grouped (every grouped rank has one context or both; the same on
  // every rank of the host).
  bool active() const { return core || leaders; }
};

struct Communicator::Impl {
  // Takes the links made by Communicator::create, opens the collective trace and starts the
  // communicator thread.
  Impl(std::shared_ptr<Store> store, std::string group, int rank, int size,
       CommunicatorOptions options, std::unique_ptr<Transport> transport, Topology topology,
       std::unique_ptr<shm::Context> shm, ShmCores cores);
  // Finishes queued operations, then stops the thread (the links close after it).
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // --- the operation queue (communicator_queue.cc) ---
  // Queues fn to run on the communicator thread as operation `op`; inside a blocking call
  // (Communicator::blocking), runs it on the calling thread instead when nothing is queued
  // or running.
  std::shared_ptr<Work> enqueue(std::string op, std::function<void(Deadline)> fn);
  void loop();
  void run_one(const std::string& op, const std::function<void(Deadline)>& fn, Work& work,
               uint64_t seq);
  // Records the failure under "<group>/abort" (the first rank to fail), breaks the links and
  // returns the error every later call rethrows.
  std::exception_ptr on_failure(const std::string& op, std::exception_ptr error);

  // --- choosing and running the allreduce (allreduce_choice.cc, communicator.cc) ---
  // The algorithm an allreduce / broadcast of `bytes` runs with under options_.
  Algorithm allreduce_algorithm(size_t bytes) const;
  Algorithm broadcast_algorithm(size_t bytes) const;
  // The whole plan of an allreduce of count elements (allreduce_plan.h): the algorithm (by
  // options, size and topology; across hosts choose_allreduce), the shared-memory step, the
  // placement. Collective where it measures or probes: every rank at the same call, as the
  // allreduce itself (comm thread). `local`: the host's links for the call (null without
  // shared memory); a placement probe is its first sync.
  AllreducePlan plan_allreduce(size_t count, DataType t, ReduceOp op, algo::ShmLinks* local,
                               Deadline deadline, const std::string& name);
  // Plans the allreduce and carries the plan out in place on recv (comm thread).
  void run_allreduce(void* recv, size_t count, DataType t, ReduceOp op, Deadline deadline,
                     const std::string& name);
  // The form of an allreduce of count elements across hosts under kAuto, the same on every
  // rank and in every run that reads the same record: at the first such call, rank 0's
  // record of earlier runs (load_choices); for a size it lacks, measure_allreduce. Comm
  // thread; collective: every rank calls it at the same call.
  Algorithm choose_allreduce(size_t count, DataType t, ReduceOp op, Deadline deadline,
                             const std::string& name);
  void load_choices(Deadline deadline, const std::string& name);
  // Times the hierarchical and flat-ring allreduce of count elements on a scratch buffer,
  // agrees on the faster (slowest rank's times), has rank 0 record it, and returns the
  // recorded decision (another run's, when it recorded one meanwhile).
  Algorithm measure_allreduce(size_t count, DataType t, ReduceOp op, Deadline deadline,
                              const std::string& name);
  // The decision taken for allreduces of `bytes` (kAuto: none yet). Any thread.
  Algorithm measured_allreduce(size_t bytes) const;
  // The shared-memory step of a flat allreduce of count elements on one host under
  // options_.measure_shm_small, for sizes in (kMeasuredSmallMin, kMeasuredSmallMax]: small or
  // direct, the same on every rank and in every run that reads the same record: at the first
  // such call, rank 0's record; for a size it lacks, both forms timed on a scratch buffer, the
  // rule's (shm_small_bytes) unless the other is 10% faster (FormTimes::keep_rule_unless_faster),
  // recorded by rank 0 (measure_shm_step).
  // Comm thread; collective.
  ShmStep choose_shm_step(size_t count, DataType t, ReduceOp op, Deadline deadline, const std::string& name);
  ShmStep measure_shm_step(size_t count, DataType t, ReduceOp op, Deadline deadline, const std::string& name);
  // What the shared-memory steps recorded depend on: world, machine, the slots' options.
  std::string shm_step_fingerprint() const;
  // Rank 0's record for `fingerprint` on every rank: per size bucket the value (choice_cache.h
  // FormNames) where `accept` takes it, else -1 (a missing or unreadable record: none).
  std::array<int32_t, 64> recorded_choices(const std::string& fingerprint, const FormNames& names,
                                           const std::function<bool(int)>& accept, Deadline deadline,
                                           const std::string& name);
  // Two forms' seconds per call, each the slowest rank's: the best round and the median round.
  struct FormTimes {
    std::array<double, 2> best, median;
    // The form taken where `rule` is the rule's: the other only when it is at least `margin`
    // faster by the median round and faster by the best one too (a single lucky round on a
    // busy machine moves nothing).
    int keep_rule_unless_faster(int rule, double margin) const;
  };
  // Runs run(0) and run(1) `calls` times each in rounds, every rank starting each together
  // (one untimed round, then kMeasureRounds).
  FormTimes timed_forms(const std::function<void(int form)>& run, int calls, Deadline deadline,
                        const std::string& name);
  // Rank 0 records `measured` for (fingerprint, bucket) unless another run did first; every
  // rank returns the recorded decision.
  int record_decision(const std::string& fingerprint, int bucket, int measured, const FormNames& names,
                      Deadline deadline, const std::string& name);
  // One kind of decision taken by bucket (size class or reading class) on one host: rank 0's
  // record for `fingerprint` read at the first call (values `accept` takes), else, for a bucket
  // it lacks, measure() now (-1: not decided, nothing kept). Returns the value or -1. Comm
  // thread; collective, as every decision here.
  struct RecordedDecisions {
    std::array<int32_t, 64> values{};
    bool loaded = false;
  };
  int decided(RecordedDecisions& d, const std::string& fingerprint, const FormNames& names,
              const std::function<bool(int)>& accept, int bucket, const std::function<int()>& measure,
              Deadline deadline, const std::string& name);
  // Times the direct form with cached and with streamed stores at `bytes` (classify_far).
  bool measure_far(uint32_t ns, bool line_far, size_t bytes, Deadline deadline, const std::string& name);
  // Rank 0's value on every rank (others pass anything >= -1 smaller; one tiny allreduce).
  int agree_on_rank0(int value, Deadline deadline, const std::string& name);
  // What the record's decisions depend on: world, ranks per host, machine, options.
  std::string choice_fingerprint() const;

  // Whether an allreduce of count elements takes the core-grouped form (cores_ active): above
  // shm_cores_min_bytes, or under options_.measure_shm_cores for sizes in (kMeasuredCoresMin,
  // kMeasuredCoresMax] as rank 0's record has it, else measured (choose_cores_step), and only
  // where cores_far says far. Comm thread; collective, as the allreduce.
  bool takes_cores(size_t count, DataType t, ReduceOp op, Deadline deadline, const std::string& name);
  // kCores or kNone (the flat form) for this size: rank 0's record, else both timed on a scratch
  // buffer, the rule's unless the other is 10% faster (FormTimes::keep_rule_unless_faster), recorded.
  ShmStep choose_cores_step(size_t count, DataType t, ReduceOp op, Deadline deadline, const std::string& name);
  ShmStep measure_cores_step(size_t count, DataType t, ReduceOp op, Deadline deadline, const std::string& name);
  // What the core-grouped decisions recorded depend on: world, groups, machine, slots' options.
  std::string cores_fingerprint() const;
  // The host context's far classifier (shm::Context::set_far_classifier) under
  // options_.measure_far_line: the decision rank 0's record holds for the reading's half-octave
  // (far_reading_bucket), else, for a call of at least kMeasuredFarMinBytes, the direct form
  // timed with cached and with streamed stores on a scratch buffer of its size, the line's
  // answer unless the other is 10% faster (FormTimes::keep_rule_unless_faster), recorded; smaller calls
  // take the line until then. Comm thread; collective, at the probe.
  bool classify_far(uint32_t ns, bool line_far, size_t bytes, Deadline deadline, const std::string& name);
  std::string far_fingerprint() const;
  // The host context's form and sync counts back to `before` (a measurement's runs are not
  // calls; its placement probes were real and stay counted).
  void uncount_runs(const shm::PathCounts& before);
  // Whether the cores' first ranks sit far apart (cores_ active): at the first call and then
  // once kCoresProbeBytes were reduced since the last probe, they probe their placement and
  // each shares the answer on its core.
  // Every rank of the host at the same calls (the same sizes: the same decisions).
  bool cores_far(size_t bytes, Deadline deadline, const std::string& name);
  // True when the whole group is one host with shared memory.
  bool single_shm_host() const { return shm_ && topology_.hosts() == 1; }
  // Throws InvalidArgument when `peer` is not a rank of this group.
  void check_peer(int peer, const char* what) const;

  // --- identity and transports (set once) ---
  std::shared_ptr<Store> store_;
  const std::string group_;
  const int rank_;
  const int size_;
  const CommunicatorOptions options_;
  std::unique_ptr<Transport> transport_;
  const Topology topology_;
  std::unique_ptr<shm::Context> shm_;  // null when alone on the host or shm is off
  ShmCores cores_;                     // ranks that share a core (inactive: none)
  int split_count_ = 0;  // only touched by split(), which is collective and ordered

  // --- measurements ---
  // Paths already logged, by power-of-two size bucket (comm thread).
  std::string logged_paths_[64];
  // The measured allreduce choice by power-of-two size bucket (an Algorithm, -1 not yet):
  // written by the comm thread, read by callers naming an operation.
  std::array<std::atomic<int>, 64> measured_;
  std::atomic<int> measurements_{0};
  std::atomic<int> cached_choices_{0};
  bool choices_loaded_ = false;  // rank 0's record read (comm thread)
  // The shared-memory steps decided by size bucket (a ShmStep, -1 not yet; comm thread).
  RecordedDecisions shm_steps_;
  // The core-grouped decisions by size bucket (kCores or kNone, -1 not yet; comm thread).
  RecordedDecisions cores_steps_;
  // The stores decided by reading half-octave (1 far, 0 near, -1 not yet; comm thread).
  RecordedDecisions far_readings_;
  std::string choice_cache_;     // the record's path on rank 0 ("" elsewhere or off)

  // --- the queue ---
  struct Op {
    std::string name;
    std::function<void(Deadline)> fn;
    std::shared_ptr<Work> work;
    uint64_t seq = 0;  // in the collective trace; 0 without one
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;            // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  bool busy_ = false;               // an operation runs (either thread); guarded by mu_
  std::atomic<uint64_t> inline_ops_{0};
  std::exception_ptr broken_;       // guarded by mu_
  AllreducePlan last_plan_;         // guarded by mu_
  // This rank's flight recorder (trace.h), when HEFT_TRACE_DIR is set; written under mu_ or
  // by the thread running the operation.
  std::unique_ptr<CollectiveTrace> trace_;
  std::thread thread_;  // last: started once everything above is set up
};

}  // namespace heft::comm
