// Which allreduce form runs (communicator_impl.h): by options, size and topology, and where a
// machine decides by measurement (across hosts under kAuto: hierarchical or the flat ring,
// or over TCP alone recursive doubling or the ring, choose_allreduce; on one host, a small allreduce's shared-memory step: small or direct,
// choose_shm_step; where ranks share cores, the core-grouped or the flat form,
// choose_cores_step) rank 0's record of earlier runs (choice_cache.h), else a measurement
// before the first call of a size, recorded for the next runs.
#include <algorithm>
#include <chrono>
#include <vector>

#include <spdlog/spdlog.h>

#include "heft/comm/algo/dissemination_barrier.h"
#include "heft/comm/algo/hierarchical_allreduce.h"
#include "heft/comm/algo/recursive_doubling_allreduce.h"
#include "heft/comm/algo/ring_allreduce.h"
#include "heft/comm/algo/shm_allreduce.h"
#include "heft/comm/choice_cache.h"
#include "heft/comm/communicator_impl.h"
#include "heft/error.h"

namespace heft::comm {

namespace {
// Timed runs of each form: the best of several is robust to a rank descheduled once.
constexpr int kMeasureRounds = 4;
// How much faster than the rule's form a measured form on one host (a small allreduce's other
// shared-memory step, the other of core-grouped and flat) must be to be taken: where the two
// are within the machine's noise, the measurement does not move the crossover.
constexpr double kRuleMargin = 0.10;
}  // namespace

Algorithm Communicator::Impl::allreduce_algorithm(size_t bytes) const {
  Algorithm a = options_.allreduce_algorithm;
  // The allreduce forms of the broadcast shapes, so the name reported is the one that runs.
  if (a == Algorithm::kTree) a = Algorithm::kRecursiveDoubling;
  if (a == Algorithm::kChain) a = Algorithm::kRing;
  const bool shared = options_.shared_memory && topology_.any_shared_host();
  if ((a == Algorithm::kShm && !single_shm_host()) || (a == Algorithm::kHierarchical && !shared))
    a = Algorithm::kAuto;  // not possible on this topology: fall back
  if (a != Algorithm::kAuto) return a;
  if (single_shm_host()) return Algorithm::kShm;
  if (shared && topology_.hosts() > 1) {
    if (bytes <= options_.small_message_bytes || !options_.measure_allreduce)
      return Algorithm::kHierarchical;
    return measured_allreduce(bytes);  // kAuto until measured: run_allreduce measures
  }
  if (options_.measure_allreduce && options_.measure_small_messages && measured_tcp_size(bytes))
    return measured_allreduce(bytes);  // kAuto until measured: run_allreduce measures
  return bytes <= options_.small_message_bytes ? Algorithm::kRecursiveDoubling
                                               : Algorithm::kRing;
}

Algorithm Communicator::Impl::measured_allreduce(size_t bytes) const {
  const int m = measured_[size_bucket(bytes)].load(std::memory_order_acquire);
  return m < 0 ? Algorithm::kAuto : static_cast<Algorithm>(m);
}

std::string Communicator::Impl::choice_fingerprint() const {
  std::string hosts;
  for (const auto& ranks : topology_.ranks_of_host)
    hosts += (hosts.empty() ? "" : ",") + std::to_string(ranks.size());
  const char* single_copy[] = {"auto", "on", "off"};
  std::string key = fmt::format(
      "v2 world={} hosts={} host0={} machine={} small={} chunk={} shm_small={} single_copy={}",
      size_, hosts, options_.host.empty() ? "-" : options_.host, machine_description(),
      options_.small_message_bytes, options_.shm_chunk_bytes, options_.shm_small_bytes,
      single_copy[static_cast<int>(options_.shm_single_copy)]);
  for (char& c : key)
    if (c == '\t' || c == '\n') c = ' ';
  return key;
}

int Communicator::Impl::agree_on_rank0(int value, Deadline deadline,
                                       const std::string& name) {
  int32_t v = rank_ == 0 ? value : -1;
  algo::Links links{*transport_, deadline, name,
                    algo::call_signature(algo::Call::allreduce, 1, DataType::i32, ReduceOp::max)};
  algo::recursive_doubling_allreduce(links, &v, 1, DataType::i32, ReduceOp::max);
  return v;
}

std::array<int32_t, kSizeBuckets> Communicator::Impl::recorded_choices(const std::string& fingerprint,
                                                                      const FormNames& names,
                                                                      const std::function<bool(int)>& accept,
                                                                      Deadline deadline, const std::string& name) {
  std::array<int32_t, kSizeBuckets> known;
  known.fill(-1);
  if (rank_ == 0 && !choice_cache_.empty()) {
    try {
      const auto recorded = read_choices(choice_cache_, fingerprint, names);
      for (int b = 0; b < kSizeBuckets; ++b)  // only the forms measured (a hand edit?)
        if (recorded[b] >= 0 && accept(recorded[b])) known[b] = recorded[b];
    } catch (const Error& e) {
      spdlog::warn("rank 0: {} (measuring again)", e.what());
    }
  }
  // Rank 0's record decides for every rank (the others may have other homes, or none).
  algo::Links links{*transport_, deadline, name,
                    algo::call_signature(algo::Call::allreduce, kSizeBuckets, DataType::i32,
                                         ReduceOp::max)};
  algo::recursive_doubling_allreduce(links, known.data(), kSizeBuckets, DataType::i32,
                                     ReduceOp::max);
  return known;
}

void Communicator::Impl::load_choices(Deadline deadline, const std::string& name) {
  const std::array<int32_t, kSizeBuckets> known = recorded_choices(
      choice_fingerprint(), {},
      [](int v) {
        return v == static_cast<int>(Algorithm::kRing) || v == static_cast<int>(Algorithm::kHierarchical) ||
               v == static_cast<int>(Algorithm::kRecursiveDoubling);
      },
      deadline, name);
  int found = 0;
  for (int b = 0; b < kSizeBuckets; ++b) {
    if (known[b] < 0) continue;
    measured_[b].store(known[b], std::memory_order_release);
    ++found;
  }
  cached_choices_.fetch_add(found, std::memory_order_acq_rel);
  spdlog::debug("rank {}: {} allreduce size(s) across hosts decided by rank 0's record{}",
                rank_, found, rank_ != 0              ? ""
                              : choice_cache_.empty() ? " (none: HEFT_ALLREDUCE_CACHE=off)"
                                                      : " " + choice_cache_);
}

Algorithm Communicator::Impl::choose_allreduce(size_t count, DataType t, ReduceOp op,
                                               Deadline deadline, const std::string& name) {
  if (!choices_loaded_) {
    load_choices(deadline, name);
    choices_loaded_ = true;
  }
  const Algorithm known = measured_allreduce(count * element_size(t));
  return known != Algorithm::kAuto ? known : measure_allreduce(count, t, op, deadline, name);
}

Communicator::Impl::FormTimes Communicator::Impl::timed_forms(const std::function<void(int)>& run, int calls,
                                                             Deadline deadline, const std::string& name) {
  std::array<std::vector<double>, 2> times;  // seconds per call, per form, per timed round
  algo::Links sync{*transport_, deadline, name, algo::call_signature(algo::Call::barrier, 0)};
  // Round 0 warms both forms up (buffers, pages, links) untimed.
  for (int round = 0; round <= kMeasureRounds; ++round) {
    for (int form = 0; form < 2; ++form) {
      algo::dissemination_barrier(sync);  // start together: a rank's time is not its wait
      const auto start = std::chrono::steady_clock::now();
      for (int call = 0; call < calls; ++call) run(form);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
      if (round > 0) times[static_cast<size_t>(form)].push_back(s);
    }
  }
  // best 0, best 1, median 0, median 1 (the upper median of an even count)
  std::array<double, 4> t{};
  for (size_t form = 0; form < 2; ++form) {
    std::sort(times[form].begin(), times[form].end());
    t[form] = times[form].front();
    t[2 + form] = times[form][times[form].size() / 2];
  }
  // Every rank must choose the same: decide on the slowest rank's times.
  algo::Links links{*transport_, deadline, name,
                    algo::call_signature(algo::Call::allreduce, 4, DataType::f64, ReduceOp::max)};
  algo::recursive_doubling_allreduce(links, t.data(), 4, DataType::f64, ReduceOp::max);
  return FormTimes{{t[0], t[1]}, {t[2], t[3]}};
}

int Communicator::Impl::FormTimes::keep_rule_unless_faster(int rule, double margin) const {
  const size_t r = static_cast<size_t>(rule), o = 1 - r;
  return median[o] < median[r] * (1 - margin) && best[o] < best[r] ? static_cast<int>(o) : rule;
}

int Communicator::Impl::record_decision(const std::string& fingerprint, int bucket, int measured,
                                        const FormNames& names, Deadline deadline, const std::string& name) {
  // Rank 0 records it; a decision another run recorded meanwhile wins, on every rank.
  int recorded = measured;
  if (rank_ == 0 && !choice_cache_.empty()) {
    try {
      recorded = record_choice(choice_cache_, fingerprint, bucket, recorded, names);
    } catch (const Error& e) {
      spdlog::warn("rank 0: {} (the next run measures again)", e.what());
    }
  }
  measurements_.fetch_add(1, std::memory_order_release);
  return agree_on_rank0(recorded, deadline, name);
}

Algorithm Communicator::Impl::measure_allreduce(size_t count, DataType t, ReduceOp op,
                                                Deadline deadline, const std::string& name) {
  const size_t bytes = count * element_size(t);
  std::vector<uint8_t> scratch(bytes);  // zeros: any op and type reduce them safely
  const auto call = algo::call_signature(algo::Call::allreduce, count, t, op);
  // Hosts that share memory: hierarchical or the flat ring, the faster (no rule to keep: the
  // rule is hierarchical at every size). Else, over TCP alone: recursive doubling or the ring,
  // the rule's (small_message_bytes) unless the other is kRuleMargin faster.
  const bool hosts_share = options_.shared_memory && topology_.any_shared_host();
  const Algorithm first = hosts_share ? Algorithm::kHierarchical : Algorithm::kRecursiveDoubling;
  const FormTimes times = timed_forms(  // first, ring
      [&](int form) {
        algo::Links links{*transport_, deadline, name, call};
        if (form == 1)
          algo::ring_allreduce(links, scratch.data(), count, t, op);
        else if (hosts_share)
          algo::hierarchical_allreduce(*transport_, shm_.get(), topology_, scratch.data(), count, t, op,
                                       options_.small_message_bytes, deadline, name);
        else
          algo::recursive_doubling_allreduce(links, scratch.data(), count, t, op);
      },
      // TCP alone: a round of about 1 MiB of calls (one call of a few microseconds is noise)
      hosts_share ? 1 : static_cast<int>(std::max<size_t>(1, kMeasuredTcpMax / std::max<size_t>(1, bytes))),
      deadline, name);
  const std::array<double, 2>& best = times.best;
  const int form = hosts_share ? (best[1] < best[0] ? 1 : 0)
                               : times.keep_rule_unless_faster(bytes <= options_.small_message_bytes ? 0 : 1,
                                                               kRuleMargin);
  const Algorithm measured = form == 1 ? Algorithm::kRing : first;
  const Algorithm choice = static_cast<Algorithm>(
      record_decision(choice_fingerprint(), size_bucket(bytes), static_cast<int>(measured), {}, deadline, name));
  measured_[size_bucket(bytes)].store(static_cast<int>(choice), std::memory_order_release);
  const auto busbw = [&](double s) {  // nccl-tests' bus bandwidth, GB/s
    return s > 0 ? 2.0 * (size_ - 1) / size_ * static_cast<double>(bytes) / s / 1e9 : 0.0;
  };
  const std::string line = fmt::format(
      "allreduce of {} B over {} hosts: {} {:.3f} ms ({:.2f} GB/s busbw), flat ring "
      "{:.3f} ms ({:.2f} GB/s): {} for this size{}",
      bytes, topology_.hosts(), comm::name(first), best[0] * 1e3, busbw(best[0]), best[1] * 1e3, busbw(best[1]),
      comm::name(choice), choice == measured ? "" : " (recorded by another run meanwhile)");
  spdlog::debug("rank {}: {}", rank_, line);  // as the single-copy measurement
  return choice;
}

namespace {
// The shared-memory steps a record may hold, by value (choice_cache.h FormNames).
const FormNames& shm_step_names() {
  static const FormNames names = [] {
    FormNames n;
    for (ShmStep s : {ShmStep::kNone, ShmStep::kSmall, ShmStep::kDirect, ShmStep::kSlots, ShmStep::kSingleCopy,
                      ShmStep::kCores})
      n.push_back(name(s));
    return n;
  }();
  return names;
}
}  // namespace

std::string Communicator::Impl::shm_step_fingerprint() const {
  const char* placement[] = {"measure", "near", "far"};
  std::string key = fmt::format(
      "shm-step v2 world={} machine={} chunk={} spin={} contended_spin={} stream={} placement={}", size_,
      machine_description(), options_.shm_chunk_bytes, options_.shm_spin_us, options_.shm_contended_spin_us,
      options_.shm_stream_slots ? 1 : 0, placement[static_cast<int>(options_.shm_placement)]);
  for (char& c : key)
    if (c == '\t' || c == '\n') c = ' ';
  return key;
}

int Communicator::Impl::decided(RecordedDecisions& d, const std::string& fingerprint, const FormNames& names,
                                const std::function<bool(int)>& accept, int bucket,
                                const std::function<int()>& measure, Deadline deadline, const std::string& name) {
  if (!d.loaded) {
    d.values = recorded_choices(fingerprint, names, accept, deadline, name);
    int found = 0;
    for (int32_t v : d.values) found += v >= 0;
    cached_choices_.fetch_add(found, std::memory_order_acq_rel);
    d.loaded = true;
  }
  int32_t& v = d.values[static_cast<size_t>(bucket)];
  if (v < 0) v = static_cast<int32_t>(measure());
  return v;
}

ShmStep Communicator::Impl::choose_shm_step(size_t count, DataType t, ReduceOp op, Deadline deadline,
                                            const std::string& name) {
  return static_cast<ShmStep>(decided(
      shm_steps_, shm_step_fingerprint(), shm_step_names(),
      [](int v) { return v == static_cast<int>(ShmStep::kSmall) || v == static_cast<int>(ShmStep::kDirect); },
      size_bucket(count * element_size(t)),
      [&] { return static_cast<int>(measure_shm_step(count, t, op, deadline, name)); }, deadline, name));
}

ShmStep Communicator::Impl::measure_shm_step(size_t count, DataType t, ReduceOp op, Deadline deadline,
                                             const std::string& name) {
  const size_t bytes = count * element_size(t);
  std::vector<uint8_t> scratch(bytes);  // zeros: any op and type reduce them safely
  const auto call = algo::call_signature(algo::Call::allreduce, count, t, op);
  const shm::PathCounts counts = shm_->path_counts();  // the measurement's runs are not calls
  bool far = false;
  {
    algo::ShmLinks links{*shm_, deadline, name, call};
    far = links.far(bytes);  // the direct step's stores, as the plan will take them
  }
  // A round runs each form on about kMeasuredSmallMax bytes in all (32 calls of 1 KiB, one of
  // 32 KiB): one call of a few microseconds is within a timer's and a wake-up's noise.
  const int calls = static_cast<int>(std::max<size_t>(1, kMeasuredSmallMax / std::max<size_t>(1, bytes)));
  const FormTimes times = timed_forms(  // small, direct
      [&](int form) {
        algo::ShmLinks links{*shm_, deadline, name, call};
        algo::shm_allreduce(links, scratch.data(), count, t, op, form == 0 ? ShmStep::kSmall : ShmStep::kDirect,
                            form == 1 && far, size_);
      },
      calls, deadline, name);
  uncount_runs(counts);
  // The rule's step unless the other is faster by kRuleMargin (FormTimes::keep_rule_unless_faster).
  const ShmStep rule = flat_shm_step(bytes, options_.shm_small_bytes, CommunicatorOptions::ShmForm::kAuto, false);
  const ShmStep measured =
      times.keep_rule_unless_faster(rule == ShmStep::kSmall ? 0 : 1, kRuleMargin) == 0 ? ShmStep::kSmall
                                                                                       : ShmStep::kDirect;
  const std::array<double, 2>& median = times.median;
  const ShmStep choice = static_cast<ShmStep>(record_decision(
      shm_step_fingerprint(), size_bucket(bytes), static_cast<int>(measured), shm_step_names(), deadline, name));
  spdlog::debug("rank {}: allreduce of {} B on one host, median rounds: small {:.1f} us, direct {:.1f} us: {} for this size{}",
                rank_, bytes, median[0] * 1e6, median[1] * 1e6, comm::name(choice),
                choice == measured ? "" : " (recorded by another run meanwhile)");
  return choice;
}

void Communicator::Impl::uncount_runs(const shm::PathCounts& before) {
  shm::PathCounts& now = shm_->path_counts();
  now.small = before.small;
  now.slots = before.slots;
  now.single_copy = before.single_copy;
  now.direct = before.direct;
  now.cores = before.cores;
  now.one_pass = before.one_pass;
  now.streamed = before.streamed;
  now.far = before.far;
  now.syncs = before.syncs;
}

bool Communicator::Impl::takes_cores(size_t count, DataType t, ReduceOp op, Deadline deadline,
                                     const std::string& name) {
  const size_t bytes = count * element_size(t);
  const bool measured = options_.measure_shm_cores && measured_cores_size(bytes);
  if (!measured && bytes <= options_.shm_cores_min_bytes) return false;
  if (!cores_far(bytes, deadline, name)) return false;  // near: the flat forms, at every size
  return !measured || choose_cores_step(count, t, op, deadline, name) == ShmStep::kCores;
}

namespace {
// The core-grouped decisions a record may hold: "flat" (ShmStep::kNone's value) or "cores".
const FormNames& cores_step_names() {
  static const FormNames names = [] {
    FormNames n(static_cast<size_t>(ShmStep::kCores) + 1, "-");
    n[static_cast<size_t>(ShmStep::kNone)] = "flat";
    n[static_cast<size_t>(ShmStep::kCores)] = name(ShmStep::kCores);
    return n;
  }();
  return names;
}
}  // namespace

std::string Communicator::Impl::cores_fingerprint() const {
  const char* placement[] = {"measure", "near", "far"};
  std::string key = fmt::format(
      "shm-cores v1 world={} machine={} core_group={} core_ranks={} leaders={} chunk={} small={} form={} spin={} "
      "contended_spin={} stream={} placement={}",
      size_, machine_description(), options_.shm_core_group, cores_.core_ranks.size(),
      cores_.leader_ranks.size(), options_.shm_chunk_bytes, options_.shm_small_bytes,
      static_cast<int>(options_.effective_shm_form()), options_.shm_spin_us, options_.shm_contended_spin_us,
      options_.shm_stream_slots ? 1 : 0, placement[static_cast<int>(options_.shm_placement)]);
  for (char& c : key)
    if (c == '\t' || c == '\n') c = ' ';
  return key;
}

ShmStep Communicator::Impl::choose_cores_step(size_t count, DataType t, ReduceOp op, Deadline deadline,
                                              const std::string& name) {
  return static_cast<ShmStep>(decided(
      cores_steps_, cores_fingerprint(), cores_step_names(),
      [](int v) { return v == static_cast<int>(ShmStep::kNone) || v == static_cast<int>(ShmStep::kCores); },
      size_bucket(count * element_size(t)),
      [&] { return static_cast<int>(measure_cores_step(count, t, op, deadline, name)); }, deadline, name));
}

ShmStep Communicator::Impl::measure_cores_step(size_t count, DataType t, ReduceOp op, Deadline deadline,
                                               const std::string& name) {
  const size_t bytes = count * element_size(t);
  std::vector<uint8_t> scratch(bytes);  // zeros: any op and type reduce them safely
  const auto call = algo::call_signature(algo::Call::allreduce, count, t, op);
  const shm::PathCounts counts = shm_->path_counts();
  // The flat form as the plan would run it: the rule's step, its stores by the placement.
  const ShmStep flat =
      flat_shm_step(bytes, options_.shm_small_bytes, options_.effective_shm_form(), shm_->cma_available());
  bool far = false;
  if (flat == ShmStep::kDirect) {
    algo::ShmLinks links{*shm_, deadline, name, call};
    far = links.far(bytes);
  }
  // A round reduces about kMeasuredCoresMax bytes with each form.
  const int calls = static_cast<int>(std::max<size_t>(1, kMeasuredCoresMax / std::max<size_t>(1, bytes)));
  const FormTimes times = timed_forms(  // flat, core-grouped
      [&](int form) {
        if (form == 0) {
          algo::ShmLinks links{*shm_, deadline, name, call};
          algo::shm_allreduce(links, scratch.data(), count, t, op, flat, far, size_);
        } else {
          algo::core_grouped_allreduce(cores_.core.get(), cores_.leaders.get(), scratch.data(), count, t, op,
                                       options_.shm_small_bytes, size_, deadline, name);
        }
      },
      calls, deadline, name);
  uncount_runs(counts);
  const bool cores = times.keep_rule_unless_faster(bytes > options_.shm_cores_min_bytes ? 1 : 0, kRuleMargin) == 1;
  const std::array<double, 2>& median = times.median;
  const ShmStep measured = cores ? ShmStep::kCores : ShmStep::kNone;
  const ShmStep choice = static_cast<ShmStep>(record_decision(
      cores_fingerprint(), size_bucket(bytes), static_cast<int>(measured), cores_step_names(), deadline, name));
  spdlog::debug("rank {}: allreduce of {} B on one host, ranks sharing cores, median rounds: flat ({}) {:.1f} us, core-grouped "
                "{:.1f} us: {} for this size{}",
                rank_, bytes, comm::name(flat), median[0] * 1e6, median[1] * 1e6,
                choice == ShmStep::kCores ? "core-grouped" : "flat",
                choice == measured ? "" : " (recorded by another run meanwhile)");
  return choice;
}

namespace {
// The stores a record may hold for a reading: "near" (cached, 0) or "far" (streamed, 1).
const FormNames& far_names() {
  static const FormNames names = {"near", "far"};
  return names;
}
}  // namespace

std::string Communicator::Impl::far_fingerprint() const {
  std::string key = fmt::format("shm-far v1 world={} machine={} chunk={} spin={} contended_spin={} disjoint={}",
                                size_, machine_description(), options_.shm_chunk_bytes, options_.shm_spin_us,
                                options_.shm_contended_spin_us, shm_->placement_disjoint() ? 1 : 0);
  for (char& c : key)
    if (c == '\t' || c == '\n') c = ' ';
  return key;
}

bool Communicator::Impl::classify_far(uint32_t ns, bool line_far, size_t bytes, Deadline deadline,
                                      const std::string& name) {
  const int v = decided(
      far_readings_, far_fingerprint(), far_names(), [](int x) { return x == 0 || x == 1; }, far_reading_bucket(ns),
      [&] {  // a call too short to time the stores apart takes the line, deciding nothing
        return bytes < kMeasuredFarMinBytes ? -1 : measure_far(ns, line_far, bytes, deadline, name) ? 1 : 0;
      },
      deadline, name);
  return v < 0 ? line_far : v == 1;
}

bool Communicator::Impl::measure_far(uint32_t ns, bool line_far, size_t bytes, Deadline deadline,
                                     const std::string& name) {
  const int bucket = far_reading_bucket(ns);
  // The direct form of a call of this size, both stores, as the plan would run it.
  const size_t count = bytes / sizeof(float);
  std::vector<float> scratch(count);  // zeros
  const auto call = algo::call_signature(algo::Call::allreduce, count, DataType::f32, ReduceOp::sum);
  const shm::PathCounts counts = shm_->path_counts();
  // A round of about 4 MiB: a placement moves within seconds, a round takes about a millisecond.
  const int calls = static_cast<int>(std::max<size_t>(1, (size_t{4} << 20) / bytes));
  const FormTimes times = timed_forms(  // cached, streamed
      [&](int form) {
        algo::ShmLinks links{*shm_, deadline, name, call};
        algo::shm_allreduce(links, scratch.data(), count, DataType::f32, ReduceOp::sum, ShmStep::kDirect, form == 1,
                            size_);
      },
      calls, deadline, name);
  uncount_runs(counts);
  const bool measured = times.keep_rule_unless_faster(line_far ? 1 : 0, kRuleMargin) == 1;
  const std::array<double, 2>& median = times.median;
  const bool far = record_decision(far_fingerprint(), bucket, measured ? 1 : 0, far_names(), deadline, name) == 1;
  spdlog::debug("rank {}: placement reading {} ns per sync (half-octave {}), direct allreduce of {} B: cached "
                "stores {:.1f} us, streamed {:.1f} us (median rounds): {} (the {} ns line said {}){}",
                rank_, ns, bucket, bytes, median[0] * 1e6, median[1] * 1e6, far ? "far" : "near",
                options_.shm_far_sync_ns, line_far ? "far" : "near",
                far == measured ? "" : " (recorded by another run meanwhile)");
  return far;
}

}  // namespace heft::comm
