#include "heft/comm/knobs.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "heft/error.h"

namespace heft::comm {

namespace {

long long number(const char* var, const std::string& v, long long min_value) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (*end != '\0' || x < min_value)
    throw InvalidArgument(std::string(var) + ": expected an integer >= " +
                          std::to_string(min_value) + ", found '" + v + "'");
  return x;
}

// One of `choices` (its index); else an error listing them.
template <size_t N>
size_t choice(const char* var, const std::string& v, const char* const (&choices)[N]) {
  const auto it = std::find(std::begin(choices), std::end(choices), v);
  if (it != std::end(choices)) return static_cast<size_t>(it - std::begin(choices));
  std::string all;
  for (size_t i = 0; i < N; ++i)
    all += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + choices[i];
  throw InvalidArgument(std::string(var) + ": expected " + all + ", found '" + v + "'");
}

Algorithm algorithm(const char* var, const std::string& v) {
  try {
    return parse_algorithm(v);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(var) + ": " + e.what());
  }
}

std::vector<Knob> make_knobs() {
  const CommunicatorOptions d;  // the defaults the docs show
  const auto n = [](auto x) { return std::to_string(x); };
  return {
      {"HEFT_ALLREDUCE_ALGO", name(d.allreduce_algorithm),
       "force an allreduce algorithm (`ring`, `recursive_doubling`, `tree`, `chain`, `shm`, "
       "`hierarchical`)",
       [](CommunicatorOptions& o, const std::string& v) {
         o.allreduce_algorithm = algorithm("HEFT_ALLREDUCE_ALGO", v);
       }},
      {"HEFT_BROADCAST_ALGO", name(d.broadcast_algorithm), "force a broadcast algorithm",
       [](CommunicatorOptions& o, const std::string& v) {
         o.broadcast_algorithm = algorithm("HEFT_BROADCAST_ALGO", v);
       }},
      {"HEFT_SMALL_MESSAGE_BYTES", "auto",
       "TCP: latency algorithms up to this size (auto: the flat allreduce per size from 4 KiB "
       "to 1 MiB as this machine's links measured and recorded in HEFT_ALLREDUCE_CACHE, 65536 "
       "outside and for the broadcast and the hierarchical form)",
       [](CommunicatorOptions& o, const std::string& v) {
         o.measure_small_messages = v == "auto";
         if (!o.measure_small_messages)
           o.small_message_bytes = static_cast<size_t>(number("HEFT_SMALL_MESSAGE_BYTES", v, 0));
       }},
      {"HEFT_ALLREDUCE_MEASURE", d.measure_allreduce ? "1" : "0",
       "across hosts: measure hierarchical against the flat ring per size above the small size, "
       "once per machine (`0`: hierarchical always, and over TCP alone the small size's rule)",
       [](CommunicatorOptions& o, const std::string& v) {
         const char* const values[] = {"1", "0"};
         o.measure_allreduce = choice("HEFT_ALLREDUCE_MEASURE", v, values) == 0;
       }},
      {"HEFT_ALLREDUCE_CACHE", "`$HEFT_HOME/comm/allreduce-forms`",
       "where rank 0 records those decisions; `off`: none (each run measures again); read by "
       "`choice_cache.cc`",
       nullptr},
      {"HEFT_TRANSPORT", d.shared_memory ? "auto" : "tcp", "`tcp`: no shared memory",
       [](CommunicatorOptions& o, const std::string& v) {
         const char* const values[] = {"auto", "tcp"};
         o.shared_memory = choice("HEFT_TRANSPORT", v, values) == 0;
       }},
      {"HEFT_BIND_ADDRESS", "the store's interface",
       "where peers listen (never wider than asked)",
       [](CommunicatorOptions& o, const std::string& v) { o.bind_address = v; }},
      {"HEFT_SHM_CHUNK_BYTES", "half the L2 cache (64 KiB-1 MiB; 262144 where unknown)",
       "shared-memory pipeline chunk, a multiple of 64",
       [](CommunicatorOptions& o, const std::string& v) {
         const long long x = number("HEFT_SHM_CHUNK_BYTES", v, 4096);
         if (x % 64 != 0)
           throw InvalidArgument("HEFT_SHM_CHUNK_BYTES: expected a multiple of 64, found " + v);
         o.shm_chunk_bytes = static_cast<size_t>(x);
       }},
      {"HEFT_SHM_SMALL_BYTES", "auto",
       "shared-memory allreduce: whole-buffer form up to this size (auto: per size from 1 to 32 "
       "KiB as this machine measured and recorded in HEFT_ALLREDUCE_CACHE, 16384 outside)",
       [](CommunicatorOptions& o, const std::string& v) {
         o.measure_shm_small = v == "auto";
         if (!o.measure_shm_small)
           o.shm_small_bytes = static_cast<size_t>(number("HEFT_SHM_SMALL_BYTES", v, 0));
       }},
      {"HEFT_SHM_SPIN_US", n(d.shm_spin_us) + " (auto)",
       "microseconds a shared-memory wait spins before yielding and sleeping (auto: 500 on own "
       "cores, 50 on shared ones, 0 when oversubscribed)",
       [](CommunicatorOptions& o, const std::string& v) {
         o.shm_spin_us = static_cast<int>(number("HEFT_SHM_SPIN_US", v, -1));
       }},
      {"HEFT_SHM_CONTENDED_SPIN_US", n(d.shm_contended_spin_us),
       "after a yield that took too long (another process holds the core), the waits of the "
       "next 50 ms sleep at once; ranks on disjoint cores still spin up to this long first, and "
       "once such a spin fails the rest of the 50 ms sleeps (`0`: sleep at once)",
       [](CommunicatorOptions& o, const std::string& v) {
         o.shm_contended_spin_us = static_cast<int>(number("HEFT_SHM_CONTENDED_SPIN_US", v, 0));
       }},
      {"HEFT_SHM_STREAM_SLOTS", d.shm_stream_slots ? "1" : "0",
       "`1`: the direct form writes its peers' pieces into the slots with streaming stores in "
       "every placement (far it does anyway, see [Near and far](#near-and-far-the-stores-follow-the-placement))",
       [](CommunicatorOptions& o, const std::string& v) {
         const char* const values[] = {"0", "1"};
         o.shm_stream_slots = choice("HEFT_SHM_STREAM_SLOTS", v, values) == 1;
       }},
      {"HEFT_SHM_PLACEMENT", "auto",
       "`auto`: 2 ranks on at least two CPUs probe near or far every 8 direct allreduces or "
       "HEFT_SHM_PROBE_BYTES, and far write the slots with streaming stores; `near`: cached "
       "stores always; `far`: streaming always",
       [](CommunicatorOptions& o, const std::string& v) {
         const char* const values[] = {"auto", "near", "far"};
         using P = CommunicatorOptions::ShmPlacement;
         const P forms[] = {P::kMeasure, P::kNear, P::kFar};
         o.shm_placement = forms[choice("HEFT_SHM_PLACEMENT", v, values)];
       }},
      {"HEFT_SHM_FAR_NS", "auto",
       "a probe's ns per synchronisation from which the placement counts as far (auto: each "
       "half-octave of readings as this machine measured the two stores and recorded in "
       "HEFT_ALLREDUCE_CACHE, 120 until then)",
       [](CommunicatorOptions& o, const std::string& v) {
         o.measure_far_line = v == "auto";
         if (!o.measure_far_line) o.shm_far_sync_ns = static_cast<int>(number("HEFT_SHM_FAR_NS", v, 1));
       }},
      {"HEFT_SHM_PROBE_BYTES", n(d.shm_probe_bytes),
       "bytes of direct allreduces since the last probe after which the next call probes again "
       "(as after 8 calls)",
       [](CommunicatorOptions& o, const std::string& v) {
         o.shm_probe_bytes = static_cast<size_t>(number("HEFT_SHM_PROBE_BYTES", v, 1));
       }},
      {"HEFT_SHM_FORM", "auto",
       "large shared-memory allreduce: `auto` is `direct` (the rule above); `slots`; "
       "`single_copy` (cross-memory attach where the kernel allows, else direct)",
       [](CommunicatorOptions& o, const std::string& v) {
         const char* const values[] = {"auto", "direct", "slots", "single_copy"};
         o.shm_form = static_cast<CommunicatorOptions::ShmForm>(choice("HEFT_SHM_FORM", v, values));
       }},
      {"HEFT_SHM_SINGLE_COPY", "auto",
       "the older switch: `1` is `HEFT_SHM_FORM=single_copy`, `0` is `slots`",
       [](CommunicatorOptions& o, const std::string& v) {
         const char* const values[] = {"auto", "1", "0"};
         using S = CommunicatorOptions::SingleCopy;
         const S forms[] = {S::kAuto, S::kOn, S::kOff};
         o.shm_single_copy = forms[choice("HEFT_SHM_SINGLE_COPY", v, values)];
       }},
      {"HEFT_SHM_CORES", "auto",
       "ranks that share a core: `auto` groups the ranks bound to one CPU each by their CPU "
       "(`HEFT_BIND=pack`); `off` never; a number k from 1 to 1024 groups consecutive local "
       "ranks by k whatever the binding (comparisons)",
       [](CommunicatorOptions& o, const std::string& v) {
         if (v == "auto") {
           o.shm_core_group = -1;
         } else if (v == "off") {
           o.shm_core_group = 0;
         } else {
           char* end = nullptr;
           const long k = std::strtol(v.c_str(), &end, 10);
           if (*end != '\0' || k < 1 || k > 1024)
             throw InvalidArgument(
                 "HEFT_SHM_CORES: expected auto, off or a group size from 1 to 1024, found '" +
                 v + "'");
           o.shm_core_group = static_cast<int>(k);
         }
       }},
      {"HEFT_SHM_CORES_MIN_BYTES", "auto",
       "grouped ranks take the core-grouped allreduce above this size where their probe reads "
       "far (auto: per size from 32 KiB to 1 MiB as this machine measured and recorded in "
       "HEFT_ALLREDUCE_CACHE, 131072 outside)",
       [](CommunicatorOptions& o, const std::string& v) {
         o.measure_shm_cores = v == "auto";
         if (!o.measure_shm_cores)
           o.shm_cores_min_bytes = static_cast<size_t>(number("HEFT_SHM_CORES_MIN_BYTES", v, 0));
       }},
      {"HEFT_COMPRESSION", d.compression == Compression::kBf16 ? "bf16" : "none",
       "`bf16`: lossy wire compression of every f32 allreduce",
       [](CommunicatorOptions& o, const std::string& v) {
         const char* const values[] = {"none", "bf16"};
         o.compression =
             choice("HEFT_COMPRESSION", v, values) == 1 ? Compression::kBf16 : Compression::kNone;
       }},
      {"HEFT_KERNELS", "auto",
       "`portable`: no AVX2 kernels (`avx2`: insist on them); read by `cpu.cc`", nullptr},
  };
}

std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

const char* knob_value(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

const std::vector<Knob>& tuning_knobs() {
  static const std::vector<Knob> knobs = make_knobs();
  return knobs;
}

std::string knobs_markdown() {
  std::string out = "| variable | default | meaning |\n| --- | --- | --- |\n";
  for (const Knob& k : tuning_knobs())
    out += "| `" + std::string(k.name) + "` | " + cell(k.shown_default) + " | " + cell(k.meaning) +
           " |\n";
  return out;
}

}  // namespace heft::comm
