#include "support/link_attacker.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "heft/comm/store/tcp_store.h"
#include "heft/comm/transport/tcp/pair.h"
#include "heft/error.h"
#include "support/files.h"

namespace heft::test {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// NUL-separated /proc/PID/environ: the value of `name`, or "".
std::string environ_value(const std::string& environ, const std::string& name) {
  std::istringstream in(environ);
  std::string entry;
  while (std::getline(in, entry, '\0'))
    if (entry.rfind(name + "=", 0) == 0) return entry.substr(name.size() + 1);
  return "";
}

// The socket inodes process `pid` holds open.
std::set<std::string> socket_inodes(const std::string& pid) {
  std::set<std::string> inodes;
  const std::string dir = "/proc/" + pid + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return inodes;
  while (dirent* e = ::readdir(d)) {
    char target[64];
    const ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<size_t>(n));
    if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
  }
  ::closedir(d);
  return inodes;
}

// "a.b.c.d:port" of each IPv4 socket listening in `pid`'s network namespace, by inode.
std::map<std::string, std::string> listeners(const std::string& pid) {
  std::map<std::string, std::string> by_inode;
  std::istringstream in(read_all("/proc/" + pid + "/net/tcp"));
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, st, skip, inode;
    f >> sl >> local >> remote >> st;
    for (int i = 0; i < 5; ++i) f >> skip;  // tx:rx, tr:when, retrnsmt, uid, timeout
    f >> inode;
    if (st != "0A" || local.size() != 13) continue;  // 0A: LISTEN
    const unsigned long ip = std::stoul(local.substr(0, 8), nullptr, 16);  // host order of a be32
    const unsigned long port = std::stoul(local.substr(9), nullptr, 16);
    if (ip == 0) continue;  // a wildcard listener is not one of heft's
    by_inode[inode] = std::to_string(ip & 0xff) + "." + std::to_string((ip >> 8) & 0xff) + "." +
                      std::to_string((ip >> 16) & 0xff) + "." + std::to_string(ip >> 24) + ":" +
                      std::to_string(port);
  }
  return by_inode;
}

}  // namespace

std::string LinkAttacker::Tally::summary() const {
  std::string s = "store refused " + std::to_string(store_refused) + ", " +
                  std::to_string(listeners) + " listeners dialled, " + std::to_string(refused) +
                  " handshakes refused, " + std::to_string(missed) + " missed, " +
                  std::to_string(accepted.size()) + " accepted";
  for (const std::string& a : accepted) s += "\n  " + a;
  return s;
}

LinkAttacker::LinkAttacker(std::string marker, int claimed_rank)
    : marker_(std::move(marker)), claimed_rank_(claimed_rank), thread_([this] { watch(); }) {}

LinkAttacker::~LinkAttacker() { stop(); }

LinkAttacker::Tally LinkAttacker::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return tally_;
}

void LinkAttacker::watch() {
  const std::string self = std::to_string(::getpid());
  while (!stop_) {
    DIR* proc = ::opendir("/proc");
    while (dirent* e = proc ? ::readdir(proc) : nullptr) {
      const std::string pid = e->d_name;
      if (pid.find_first_not_of("0123456789") != std::string::npos || pid == self) continue;
      std::string cmdline = read_all("/proc/" + pid + "/cmdline");
      for (char& c : cmdline)
        if (c == '\0') c = ' ';
      if (cmdline.find(marker_) == std::string::npos) continue;
      const std::string environ = read_all("/proc/" + pid + "/environ");
      const std::string rank = environ_value(environ, "RANK");
      if (rank.empty()) continue;  // not a rank (the launcher, a shell)
      const std::string job = environ_value(environ, "HEFT_JOB");
      const std::string store = environ_value(environ, "HEFT_STORE");
      if (!store.empty() && tried_.insert(store).second) attack_store(store);
      const std::set<std::string> mine = socket_inodes(pid);
      for (const auto& [inode, address] : listeners(pid))
        if (mine.count(inode) && tried_.insert(address).second)
          attack(address, (job.empty() ? "heft" : job) + "/world", std::stoi(rank));
    }
    if (proc) ::closedir(proc);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void LinkAttacker::attack_store(const std::string& address) {
  std::string outcome = "a client joined";
  try {
    comm::TcpStore::connect(address, "a-guessed-token", std::chrono::seconds(3));
  } catch (const std::exception& e) {
    outcome = e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (outcome.find("refused the job token") != std::string::npos) ++tally_.store_refused;
  else tally_.accepted.push_back("store " + address + ": " + outcome);
}

void LinkAttacker::attack(const std::string& address, const std::string& group, int listener_rank) {
  const comm::tcp::PairIdentity fake{group, "a-guessed-token", claimed_rank_, "10.255.255.1:1"};
  std::string outcome;
  bool refused = false;
  try {
    comm::tcp::connect_pair(fake, listener_rank, address,
                            std::chrono::steady_clock::now() + std::chrono::seconds(3));
    outcome = "a link formed";
  } catch (const IoError& e) {
    const std::string m = e.what();
    refused = m.find("refused the connection") != std::string::npos;
    outcome = m;
  } catch (const std::exception& e) {
    outcome = e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++tally_.listeners;
  if (refused) ++tally_.refused;
  else if (outcome == "a link formed") tally_.accepted.push_back(address + ": " + outcome);
  else ++tally_.missed;  // closed before the dial (the group had formed), or no answer in 3 s
}

void expect_all_refused(const LinkAttacker::Tally& tally, int ranks, const std::string& home,
                        const std::string& job, const std::string& from) {
  EXPECT_TRUE(tally.accepted.empty()) << tally.summary();
  EXPECT_GE(tally.refused, ranks) << tally.summary();
  EXPECT_EQ(tally.store_refused, 1) << tally.summary();
  std::string logs;
  for (int r = 0; r < ranks; ++r)
    logs += read_file(home + "/jobs/" + job + "/logs/rank-" + std::to_string(r) + ".log");
  EXPECT_NE(logs.find("refused a connection from " + from + ":"), std::string::npos)
      << logs.substr(0, 2000);
}

}  // namespace heft::test
