// `heft bench <collective>`: times a collective over its own ranks on this machine and
// prints one row per size in nccl-tests' convention, the same columns as the peer
// harnesses (../shared/peers), so rows compare one to one.
//
// The command re-executes itself as the ranks (through the local launcher, hidden flag
// --worker); rank 0 prints. Sizes go from --min to --max, times --factor each row.
// algbw = bytes / time (GB = 1e9 B); busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n
// (reduce_scatter, allgather; bytes = the whole array), 1 (broadcast). time = mean over
// iterations of the slowest rank.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "heft/cli/commands.h"
#include "heft/comm/cpu.h"
#include "heft/comm/init.h"
#include "heft/error.h"
#include "heft/job/launch/local_launcher.h"

namespace heft::cli {

namespace {

using comm::Communicator;
using comm::DataType;

struct BenchArgs {
  std::string collective;
  int ranks = 2;
  int hosts = 1;
  std::string min = "4", max = "64M";
  int factor = 4;
  int iters = 20;
  int warmup = 5;
  std::string dtype = "f32";
  std::string op = "sum";
  std::string algo = "auto";
  std::string compress = "none";
  bool check = false;
  bool worker = false;
  int timeout_s = 120;
};

size_t parse_size(const std::string& s, const char* option) {
  if (s.empty()) throw InvalidArgument(std::string(option) + ": expected a size, found ''");
  size_t mult = 1;
  std::string digits = s;
  const char last = s.back();
  if (last == 'K' || last == 'k') mult = size_t{1} << 10;
  if (last == 'M' || last == 'm') mult = size_t{1} << 20;
  if (last == 'G' || last == 'g') mult = size_t{1} << 30;
  if (mult != 1) digits.pop_back();
  char* end = nullptr;
  unsigned long long v = std::strtoull(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0')
    throw InvalidArgument(std::string(option) +
                          ": expected a size like 4, 4K, 64M, found '" + s + "'");
  return static_cast<size_t>(v) * mult;
}

double bus_factor(const std::string& collective, int n) {
  if (collective == "allreduce") return 2.0 * (n - 1) / n;
  if (collective == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// One collective of `bytes` total on buffers sized for it.
struct Case {
  Communicator& comm;
  const BenchArgs& args;
  DataType type;
  comm::ReduceOp op;
  size_t count;     // elements of the whole array
  size_t per_rank;  // elements per rank (reduce_scatter / allgather)
  std::vector<uint8_t> in, out;

  void run() {
    const std::string& c = args.collective;
    if (c == "allreduce")
      comm.allreduce(in.data(), in.data(), count, type, op,
                     args.compress == "bf16" ? comm::Compression::kBf16 : comm::Compression::kNone);
    else if (c == "broadcast") comm.broadcast(in.data(), count, type, 0);
    else if (c == "reduce_scatter") comm.reduce_scatter(in.data(), out.data(), per_rank, type, op);
    else comm.allgather(in.data(), out.data(), per_rank, type);
  }
};

void fill(std::vector<uint8_t>& buf, size_t count, DataType t, double v) {
  const size_t es = comm::element_size(t);
  for (size_t i = 0; i < count; ++i) comm::write_element(buf.data() + i * es, t, v);
}

// Runs the case once on closed-form input; returns the number of wrong elements.
size_t check_case(Case& k) {
  const int n = k.comm.size(), r = k.comm.rank();
  const std::string& c = k.args.collective;
  const size_t es = comm::element_size(k.type);
  fill(k.in, k.in.size() / es, k.type, c == "broadcast" ? (r == 0 ? 3 : -1) : r + 1);
  k.run();
  // Expected: sum / avg / min / max of r+1 over ranks; broadcast: 3; allgather: block j = j+1.
  double reduced = 0;
  switch (k.op) {
    case comm::ReduceOp::sum: reduced = n * (n + 1) / 2.0; break;
    case comm::ReduceOp::avg: reduced = (n + 1) / 2.0; break;
    case comm::ReduceOp::min: reduced = 1; break;
    case comm::ReduceOp::max: reduced = n; break;
    case comm::ReduceOp::product:  // n!
      reduced = 1;
      for (int j = 2; j <= n; ++j) reduced *= j;
      break;
    case comm::ReduceOp::band:
    case comm::ReduceOp::bor:
    case comm::ReduceOp::bxor: {  // 1 op 2 op ... op n
      int v = 1;
      for (int j = 2; j <= n; ++j)
        v = k.op == comm::ReduceOp::band ? v & j : k.op == comm::ReduceOp::bor ? v | j : v ^ j;
      reduced = v;
      break;
    }
  }
  if (k.op == comm::ReduceOp::avg && (k.type == DataType::i32 || k.type == DataType::i64))
    reduced = (n * (n + 1) / 2) / n;
  std::vector<uint8_t> want;
  size_t bad = 0;
  auto compare = [&](const uint8_t* got, size_t count, double v) {
    want.assign(count * es, 0);
    fill(want, count, k.type, v);
    for (size_t i = 0; i < count * es; i += es) bad += std::memcmp(got + i, want.data() + i, es) != 0;
  };
  if (c == "allreduce") compare(k.in.data(), k.count, reduced);
  else if (c == "broadcast") compare(k.in.data(), k.count, 3);
  else if (c == "reduce_scatter") compare(k.out.data(), k.per_rank, reduced);
  else
    for (int j = 0; j < n; ++j) compare(k.out.data() + j * k.per_rank * es, k.per_rank, j + 1);
  return bad;
}

// The algorithm each size runs with, as runs: " recursive_doubling from 4 B ring from 262144 B".
std::string chosen_algorithms(const Communicator& comm, const BenchArgs& args) {
  std::string out, last;
  for (size_t bytes = parse_size(args.min, "--min"); bytes <= parse_size(args.max, "--max");
       bytes *= args.factor) {
    std::string algo;
    if (args.collective == "allreduce") algo = comm::name(comm.allreduce_algorithm(bytes));
    else if (args.collective == "broadcast") algo = comm::name(comm.broadcast_algorithm(bytes));
    else algo = comm.has_shared_memory() && comm.topology().hosts() == 1 ? "shm" : "ring";
    if (algo != last) out += " " + algo + " from " + std::to_string(bytes) + " B";
    last = algo;
  }
  return out;
}

int run_worker(const BenchArgs& args) {
  comm::CommunicatorOptions options = comm::CommunicatorOptions::from_env();
  if (args.algo != "auto") {
    options.allreduce_algorithm = comm::parse_algorithm(args.algo);
    options.broadcast_algorithm = comm::parse_algorithm(args.algo);
  }
  comm::World world = comm::init(options);
  Communicator& comm = *world.comm;
  const int n = comm.size();
  const DataType type = comm::parse_data_type(args.dtype);
  const size_t es = comm::element_size(type);
  const bool split = args.collective == "reduce_scatter" || args.collective == "allgather";
  if (comm.rank() == 0) {
    std::printf(
        "# impl=heft collective=%s ranks=%d hosts=%d dtype=%s op=%s compress=%s iters=%d warmup=%d\n",
        args.collective.c_str(), n, args.hosts, args.dtype.c_str(), args.op.c_str(),
        args.compress.c_str(), args.iters, args.warmup);
    std::printf("# algo=%s transport=%s chosen:%s\n", args.algo.c_str(),
                comm.has_shared_memory() ? "shm+tcp" : "tcp", chosen_algorithms(comm, args).c_str());
    std::printf("# kernels=%s; path: what each size really ran (allreduce)\n",
                comm::name(comm::kernel_isa()));
    std::printf("# bytes time_us algbw_GBps busbw_GBps%s%s\n", args.check ? " check" : "",
                args.collective == "allreduce" ? " path" : "");
    std::fflush(stdout);
  }
  size_t failures = 0;
  for (size_t bytes = parse_size(args.min, "--min"); bytes <= parse_size(args.max, "--max");
       bytes *= args.factor) {
    size_t count = bytes / es, per_rank = split ? count / n : count;
    if (split) count = per_rank * n;
    if (count == 0) continue;
    Case k{comm, args, type, comm::parse_reduce_op(args.op), count, per_rank,
           std::vector<uint8_t>((args.collective == "allgather" ? per_rank : count) * es),
           std::vector<uint8_t>((args.collective == "allgather" ? count : per_rank) * es)};
    fill(k.in, k.in.size() / es, type, 1);
    for (int i = 0; i < args.warmup; ++i) k.run();
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < args.iters; ++i) k.run();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
               args.iters;
    const std::string path = comm.last_allreduce_path();  // before the allreduce of t below
    comm.allreduce(&t, 1, DataType::f64, comm::ReduceOp::max);
    size_t bad = args.check ? check_case(k) : 0;
    failures += bad;
    if (comm.rank() == 0) {
      const double total = static_cast<double>(count * es), alg = total / t / 1e9;
      std::printf("%zu %.1f %.3f %.3f", count * es, t * 1e6, alg,
                  alg * bus_factor(args.collective, n));
      if (args.check) std::printf(" %s", bad ? "WRONG" : "ok");
      if (args.collective == "allreduce") std::printf(" %s", path.c_str());
      std::printf("\n");
      std::fflush(stdout);
    }
    if (bad)
      std::fprintf(stderr, "heft bench: rank %d: %zu wrong elements at %zu bytes\n", comm.rank(),
                   bad, count * es);
  }
  comm.barrier();
  return failures ? 1 : 0;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw IoError("heft bench: cannot find its own executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

int run_launcher(const BenchArgs& args) {
  if (args.ranks < 1 || args.ranks > job::kMaxWorkers)
    throw InvalidArgument("--ranks: expected 1 to " + std::to_string(job::kMaxWorkers) +
                          " (heft's limit on workers), found " + std::to_string(args.ranks));
  if (args.hosts < 1 || args.ranks % args.hosts != 0)
    throw InvalidArgument("--hosts: expected a divisor of --ranks (" + std::to_string(args.ranks) +
                          "), found " + std::to_string(args.hosts));
  if (args.factor < 2) throw InvalidArgument("--factor: expected >= 2");
  if (args.iters < 1) throw InvalidArgument("--iters: expected >= 1");
  // Fail here, once, rather than in every rank.
  comm::require_op_applies(comm::parse_reduce_op(args.op), comm::parse_data_type(args.dtype),
                           "bench");
  comm::parse_algorithm(args.algo);
  if (parse_size(args.min, "--min") == 0)
    throw InvalidArgument("--min: expected at least 1 byte, found 0 (a collective of 0 "
                          "elements is legal and returns at once: there is nothing to time)");
  if (parse_size(args.min, "--min") > parse_size(args.max, "--max"))
    throw InvalidArgument("--min: expected at most --max");
  job::LocalLauncherOptions o;
  o.hosts = args.hosts;
  o.processes_per_host = args.ranks / args.hosts;
  o.command = {self_exe(), "bench", args.collective, "--worker", "--min", args.min,
               "--max", args.max, "--factor", std::to_string(args.factor), "--iters",
               std::to_string(args.iters), "--warmup", std::to_string(args.warmup),
               "--dtype", args.dtype, "--op", args.op, "--algo", args.algo,
               "--hosts", std::to_string(args.hosts), "--ranks", std::to_string(args.ranks),
               "--compress", args.compress};
  if (args.check) o.command.push_back("--check");
  o.timeout_s = args.timeout_s;
  o.prefix_output = false;
  o.log_name = "heft bench";
  o.worker_umask = user_umask();
  o.extra_env["OMP_NUM_THREADS"] = "1";
  return job::LocalLauncher(o).run();
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub = app.add_subcommand(
      "bench", "time a collective over N local ranks; rows as nccl-tests prints them");
  sub->add_option("collective", args->collective, "allreduce, reduce_scatter, allgather or broadcast")
      ->required()
      ->check(CLI::IsMember({"allreduce", "reduce_scatter", "allgather", "broadcast"}));
  sub->add_option("--ranks,-n", args->ranks, "ranks in all")->capture_default_str();
  sub->add_option("--hosts", args->hosts, "simulated hosts (must divide --ranks)")->capture_default_str();
  sub->add_option("--min", args->min, "smallest size in bytes (4, 4K, 1M, ...)")->capture_default_str();
  sub->add_option("--max", args->max, "largest size in bytes")->capture_default_str();
  sub->add_option("--factor", args->factor, "size multiplier between rows")->capture_default_str();
  sub->add_option("--iters", args->iters, "timed iterations per size")->capture_default_str();
  sub->add_option("--warmup", args->warmup, "untimed iterations per size")->capture_default_str();
  sub->add_option("--dtype", args->dtype, "f32, f64, f16, bf16, i8, u8, i16, i32, i64")->capture_default_str();
  sub->add_option("--op", args->op, "sum, avg, min, max, product, band, bor, bxor (bitwise: integer types)")->capture_default_str();
  sub->add_option("--algo", args->algo,
                  "auto, ring, recursive_doubling, tree, chain, shm, hierarchical "
                  "(HEFT_SHM_FORM picks the shm form: auto, direct, slots, single_copy)")
      ->capture_default_str();
  sub->add_option("--compress", args->compress, "allreduce wire compression of f32: none or bf16 (lossy)")
      ->check(CLI::IsMember({"none", "bf16"}))
      ->capture_default_str();
  sub->add_option("--timeout", args->timeout_s, "seconds a rank waits on a peer")->capture_default_str();
  sub->add_flag("--check", args->check, "verify every size against the closed form; exit 1 on a mismatch");
  sub->add_flag("--worker", args->worker, "internal: run as one rank")->group("");
  return [args] { return args->worker ? run_worker(*args) : run_launcher(*args); };
}

}  // namespace heft::cli
