// An attacker on the network without the job's token, for the launcher tests (mpirun, Slurm):
// while it runs, a thread watches every process whose command line contains `marker`, on any
// host of the test (it reads /proc/PID/net/tcp: that process's own network namespace), and
// dials each TCP listener of theirs as soon as it appears, from this process's network (the
// launching host), claiming to be rank `claimed_rank` of the process's world group (HEFT_JOB
// from its environment + "/world") with a guessed token. Listeners found, handshakes refused
// and any link that formed are counted; the job's store (HEFT_STORE in the environment) is
// dialled once with the guessed token too; the test asserts on them.
#pragma once

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace heft::test {

class LinkAttacker {
 public:
  struct Tally {
    int store_refused = 0;              // the job's store (HEFT_STORE) refused the guessed token
    int listeners = 0;                  // distinct listeners of the watched processes dialled
    int refused = 0;                    // handshakes the listener refused
    int missed = 0;                     // closed before the dial, or no answer in 3 s
    std::vector<std::string> accepted;  // "address: a link formed": each a failure
    std::string summary() const;
  };

  LinkAttacker(std::string marker, int claimed_rank);
  ~LinkAttacker();
  LinkAttacker(const LinkAttacker&) = delete;
  LinkAttacker& operator=(const LinkAttacker&) = delete;

  // Stops watching (waits for a handshake in flight) and returns what happened.
  Tally stop();

 private:
  void watch();
  void attack(const std::string& address, const std::string& group, int listener_rank);
  void attack_store(const std::string& address);

  std::string marker_;
  int claimed_rank_;
  std::atomic<bool> stop_{false};
  std::set<std::string> tried_;
  std::mutex mu_;
  Tally tally_;
  std::thread thread_;
};

// The launcher tests' verdict on an attacked job whose ranks 0..ranks-1 listened, logging under
// `home`/jobs/`job`/logs: no link formed, each of those ranks' listeners and the store refused
// the attacker, and the ranks' logs name a refusal from `from` (the attacker's address).
void expect_all_refused(const LinkAttacker::Tally& tally, int ranks, const std::string& home,
                        const std::string& job, const std::string& from);

}  // namespace heft::test
