#include "heft/job/launch/mpirun_launcher.h"

#include "heft/host/host.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string_view>

#include "heft/comm/auth.h"
#include "heft/comm/store/tcp_store.h"
#include "heft/error.h"
#include "heft/job/launch/external_group.h"
#include "heft/job/launch/process.h"

namespace heft::job {

namespace {

namespace fs = std::filesystem;

std::string env_of(const Environment& env, const char* name) {
  return engine_variable(env, name, "mpi-worker", "mpirun");
}

int env_int(const Environment& env, const char* name) {
  return engine_int(env, name, "mpi-worker", "mpirun");
}

}  // namespace

Result<std::vector<MpiHost>> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Result<std::vector<MpiHost>>::failure("cannot read the hostfile '" + path + "'");
  std::vector<MpiHost> hosts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name, word;
    if (!(words >> name)) continue;
    MpiHost h{name, 0};
    while (words >> word) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (eq == std::string::npos || (key != "slots" && key != "max_slots" && key != "max-slots"))
        return Result<std::vector<MpiHost>>::failure(
            path + ":" + std::to_string(n) + ": expected 'NAME [slots=N]', found '" + word + "'");
      char* end = nullptr;
      const long v = std::strtol(word.c_str() + eq + 1, &end, 10);
      if (*end != '\0' || v < 1)
        return Result<std::vector<MpiHost>>::failure(
            path + ":" + std::to_string(n) + ": " + key + " must be a positive integer, found '" +
            word.substr(eq + 1) + "'");
      if (key == "slots") h.slots = static_cast<int>(v);
    }
    hosts.push_back(h);
  }
  if (hosts.empty())
    return Result<std::vector<MpiHost>>::failure("the hostfile '" + path + "' names no host");
  return Result<std::vector<MpiHost>>::success(std::move(hosts));
}

std::string local_address_toward(const std::string& host) {
  const std::string out = host::address_toward(host);
  if (out.empty())
    throw IoError("no route from this machine to host '" + host + "' (or it does not resolve to an "
                  "IPv4 address)");
  return out;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
      else word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) throw InvalidArgument("unclosed " + std::string(1, quote) + " in '" + text + "'");
  if (in_word) words.push_back(word);
  return words;
}

std::vector<std::string> mpirun_argv(const MpirunOptions& o, const std::string& hostfile,
                                     const Environment& forward) {
  const int world = static_cast<int>(o.hosts.size()) * o.processes_per_host;
  std::vector<std::string> argv = {o.mpirun, "--hostfile", hostfile, "-np", std::to_string(world),
                                   "--map-by", "ppr:" + std::to_string(o.processes_per_host) + ":node",
                                   "--bind-to", "none"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const auto& [k, v] : forward) {
    argv.push_back("-x");
    argv.push_back(k);  // the value travels in mpirun's environment
  }
  for (std::string& w : split_words(o.custom_mpi_options)) argv.push_back(std::move(w));
  append_worker_shim(argv, o, "mpi-worker");
  return argv;
}

Environment mpi_worker_environment(const Environment& parent) {
  const int rank = env_int(parent, "OMPI_COMM_WORLD_RANK");
  const int size = env_int(parent, "OMPI_COMM_WORLD_SIZE");
  const int local_rank = env_int(parent, "OMPI_COMM_WORLD_LOCAL_RANK");
  const int local_size = env_int(parent, "OMPI_COMM_WORLD_LOCAL_SIZE");
  std::vector<std::string> hosts;  // HEFT_MPI_HOSTS: the launcher's comma-separated list
  std::istringstream list(env_of(parent, "HEFT_MPI_HOSTS"));
  for (std::string h; std::getline(list, h, ',');)
    if (!h.empty()) hosts.push_back(h);
  if (local_size < 1 || size % local_size != 0)
    throw InvalidArgument("OMPI_COMM_WORLD_LOCAL_SIZE " + std::to_string(local_size) +
                          " does not divide OMPI_COMM_WORLD_SIZE " + std::to_string(size) +
                          ": run the same number of processes on every host");
  const int host = rank / local_size;  // --map-by ppr:P:node places ranks host-major
  if (host >= static_cast<int>(hosts.size()))
    throw InvalidArgument("rank " + std::to_string(rank) + " is on host " + std::to_string(host) +
                          " but HEFT_MPI_HOSTS names " + std::to_string(hosts.size()));
  return engine_worker_environment(parent, rank, size, local_rank, local_size, host, hosts);
}

namespace {

void check_options(const MpirunOptions& o) {
  if (o.hosts.empty()) throw InvalidArgument("--hostfile: no host to run on");
  if (o.processes_per_host < 1) throw InvalidArgument("-n: expected at least 1 process a host");
  for (const MpiHost& h : o.hosts)
    if (h.slots > 0 && o.processes_per_host > h.slots)
      throw InvalidArgument("processes_per_host " + std::to_string(o.processes_per_host) +
                            " is more than the " + std::to_string(h.slots) + " slots of host " +
                            h.name + " in the hostfile");
  if (o.command.empty()) throw InvalidArgument("no command given");
}

// One start of the group: its store (fresh token), its hostfile in a private folder, and
// mpirun's environment and arguments. Values travel in mpirun's environment and `-x NAME`
// forwards them: the token never appears on a command line (ps shows those to every user).
class MpirunStart : public ExternalStart {
 public:
  MpirunStart(const MpirunOptions& o, bool tag_output)
      : bind_(o.store_bind_address.empty() ? local_address_toward(o.hosts[0].name)
                                           : o.store_bind_address),
        token_(comm::random_token()),
        store_(comm::TcpStoreServerOptions{bind_, 0, token_}) {
    char dir_template[] = "/tmp/heft-mpirun-XXXXXX";
    if (!::mkdtemp(dir_template)) throw IoError("cannot make a temporary folder for the hostfile");
    dir_ = dir_template;
    const std::string hostfile = dir_ + "/hostfile";
    {
      std::ofstream f(hostfile);
      for (const MpiHost& h : o.hosts) f << h.name << " slots=" << o.processes_per_host << "\n";
    }
    Environment vars = o.extra_env;
    std::string hosts;
    for (const MpiHost& h : o.hosts) hosts += (hosts.empty() ? "" : ",") + h.name;
    vars["HEFT_MPI_HOSTS"] = hosts;
    vars["MASTER_ADDR"] = o.hosts[0].name;
    // Only the forwarded variables reach the ranks: their PYTHONPATH is extra_env's.
    const auto pythonpath = o.extra_env.find("PYTHONPATH");
    for (auto& [k, v] : engine_start_variables(
             o, bind_, store_.port(), token_,
             pythonpath == o.extra_env.end() ? "" : pythonpath->second))
      vars[k] = std::move(v);
    spawn_.env = current_environment();
    for (const auto& [k, v] : vars) spawn_.env[k] = v;
    spawn_.argv = mpirun_argv(o, hostfile, vars);
    if (tag_output) spawn_.argv.insert(spawn_.argv.begin() + 1, "--tag-output");
    spawn_.capture_output = tag_output;
  }
  ~MpirunStart() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  SpawnOptions spawn() const override { return spawn_; }
  std::optional<std::string> peek(const std::string& key) const override {
    return store_.peek(key);
  }

 private:
  std::string bind_;
  std::string token_;
  comm::TcpStoreServer store_;
  std::string dir_;
  SpawnOptions spawn_;
};

// mpirun's --tag-output lines: "[1,3]<stdout>:text".
bool parse_tagged(std::string_view l, ExternalLine* out) {
  const auto close = l.find("]<");
  const auto colon = l.find(">:");
  if (l.empty() || l[0] != '[' || close == std::string_view::npos || colon == std::string_view::npos)
    return false;
  const auto comma = l.find(',');
  if (comma == std::string_view::npos || comma > close) return false;
  out->rank = std::atoi(std::string(l.substr(comma + 1, close - comma - 1)).c_str());
  out->is_stderr = l.substr(close + 2, colon - close - 2) == "stderr";
  out->text = l.substr(colon + 2);
  return true;
}

}  // namespace

GroupEnd run_mpirun_group(const MpirunOptions& o, const LauncherHooks& hooks,
                          std::chrono::milliseconds grace) {
  check_options(o);
  ExternalGroup g;
  g.world = static_cast<int>(o.hosts.size()) * o.processes_per_host;
  g.group = o.job_name + "/world";
  g.engine = "mpirun";
  g.log_name = o.log_name;
  g.host_of_rank = [&o](int rank) {
    return o.hosts[static_cast<size_t>(rank / o.processes_per_host)].name;
  };
  g.parse = parse_tagged;
  // mpirun's report of the first rank to fail: "  Process name: [[62513,1],2]" then
  // "  Exit code:    5".
  g.rank_exit = [named = -1](std::string_view l, int* rank, int* code) mutable {
    const size_t name = l.find("Process name: [[");
    if (name != std::string_view::npos) {
      const size_t comma = l.rfind(','), close = l.rfind(']');
      named = comma != std::string_view::npos && close != std::string_view::npos && close > comma
                  ? std::atoi(std::string(l.substr(comma + 1, close - comma - 1)).c_str())
                  : -1;
      return false;
    }
    const size_t exit = l.find("Exit code:");
    if (exit == std::string_view::npos || named < 0) return false;
    *rank = named;
    *code = std::atoi(std::string(l.substr(exit + 10)).c_str());
    return *code != 0;
  };
  g.start = [&o]() -> std::unique_ptr<ExternalStart> { return std::make_unique<MpirunStart>(o, true); };
  return run_external_group(g, hooks, grace);
}

int run_mpirun(const MpirunOptions& o) {
  check_options(o);
  MpirunStart start(o, false);
  return run_external_passthrough(start, o.log_name, "openmpi-bin");
}

}  // namespace heft::job
