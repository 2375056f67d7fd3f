// Who may join a group's links: the handshake's proofs both ways, the addresses and segment
// names signed whatever store carries them, segments of another user refused, and silent
// connections that cannot starve a rank. Attackers are real processes; "an unauthenticated
// store" is modelled by a store whose token the attacker holds but the job's links do not
// use (as torch's env:// TCPStore, which any local user may write). The link attacks run on
// every link kind: TCP on this host's loopback, and TCP between network-namespace hosts
// (tests/support/netns_hosts.sh) with the attacker on a host of its own.
// ctest-labels: multiproc
// ctest-resource-lock: netns
#include <fcntl.h>
#include <sched.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/comm/refusal_log.h"
#include "heft/comm/store/signed_value.h"
#include "heft/comm/transport/shm/segment.h"
#include "heft/comm/transport/tcp/pair.h"
#include "heft/error.h"
#include "support/command.h"
#include "support/ranks.h"

namespace heft::comm {
namespace {

using Clock = std::chrono::steady_clock;
using test::expect;
using namespace std::chrono_literals;

constexpr const char* kJobToken = "the-job-token";
constexpr int kNobody = 65534;

// This process (an attacker) drops to uid and gid 65534.
void become_nobody() {
  expect(setresgid(kNobody, kNobody, kNobody) == 0 && setresuid(kNobody, kNobody, kNobody) == 0,
         "cannot become nobody");
}

// The value a signed store key holds, its 32-byte signature cut off (addresses are no secret).
std::string unsigned_part(Store& s, const std::string& key) {
  std::string v = s.get_string(key, 30s);
  return v.substr(0, v.size() - 32);
}

// Forwards bytes between `a` and `b` until either closes or `for_how_long` passes.
void relay(tcp::Socket& a, tcp::Socket& b, std::chrono::seconds for_how_long) {
  const auto end = Clock::now() + for_how_long;
  char buf[4096];
  while (Clock::now() < end) {
    pollfd fds[2] = {{a.fd(), POLLIN, 0}, {b.fd(), POLLIN, 0}};
    if (::poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (!fds[i].revents) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) return;
      if (::write(fds[1 - i].fd, buf, static_cast<size_t>(n)) != n) return;
    }
  }
}

// Where a test's roles run. kLoopback: every role on this host's 127.0.0.1. kHosts: role r on
// network-namespace host h<r+1> (netns_hosts.sh, 10.81.0.<11+r>, hosts joined by a bridge,
// 1 Gbit/s links), so every link, the attacker's included, crosses from one host to another.
// The store stays where the test runs: a role connects to it first, then enters its host (a
// socket keeps the namespace it was made in).
enum class Net { kLoopback, kHosts };

const std::string kNetnsHosts = HEFT_SOURCE_DIR "/tests/support/netns_hosts.sh";
constexpr const char* kPrefix = "hsec";
constexpr int kHostCount = 4;  // the most roles a test below has

class Links : public testing::TestWithParam<Net> {
 protected:
  void SetUp() override {
    if (GetParam() == Net::kLoopback) return;
    const auto check = test::run_command(kNetnsHosts + " check 2>&1");
    if (check.code != 0) GTEST_SKIP() << "no namespace hosts here: " << check.text;
    const auto up = test::run_command(kNetnsHosts + " up " + std::to_string(kHostCount) +
                                      " --net 81 --prefix " + kPrefix + " 2>&1");
    ASSERT_EQ(up.code, 0) << up.text;
    hosts_up_ = true;
  }
  void TearDown() override {
    if (hosts_up_) test::run_command(kNetnsHosts + " down --prefix " + std::string(kPrefix));
  }

 public:
  // Moves this role's process onto its host; the address it listens on there.
  std::string enter(int role) const {
    if (GetParam() == Net::kLoopback) return "127.0.0.1";
    const std::string ns = "/run/netns/" + std::string(kPrefix) + "-h" + std::to_string(role + 1);
    const int fd = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    expect(fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0, "cannot enter " + ns);
    ::close(fd);
    return "10.81.0." + std::to_string(11 + role);
  }

 private:
  bool hosts_up_ = false;
};

INSTANTIATE_TEST_SUITE_P(EveryLinkKind, Links, testing::Values(Net::kLoopback, Net::kHosts),
                         [](const testing::TestParamInfo<Net>& i) {
                           return i.param == Net::kLoopback ? "loopback" : "hosts";
                         });

// A user who got rank 1 to dial it relays every byte to rank 0: rank 0 refuses the proof (it
// names the address rank 1 dialled, not the one rank 0 published), so no link forms.
TEST_P(Links, ARelayedHandshakeIsRefused) {
  test::StoreProcess store;
  const test::RunResult res = test::run_ranks(3, [&](int role) {
    auto s = store.connect();
    const std::string here = enter(role);
    if (role == 0) {  // rank 0: listens
      tcp::Socket l = tcp::listen_on(here, 0);
      const tcp::PairIdentity self{"g", kJobToken, 0, here + ":" + std::to_string(tcp::local_port(l))};
      s->set("addr0", self.address);
      try {
        tcp::accept_peers(self, l, 2, Clock::now() + 4s);
      } catch (const Timeout&) {
        return;
      }
      throw Error("rank 0 accepted a relayed connection");
    }
    if (role == 2) {  // the relay, another uid
      become_nobody();
      tcp::Socket l = tcp::listen_on(here, 0);
      s->set("relay", here + ":" + std::to_string(tcp::local_port(l)));
      tcp::Socket from_1 = tcp::accept_until(l, Clock::now() + 10s, "relay");
      const tcp::HostPort to = tcp::parse_host_port(s->get_string("addr0", 10s), "rank 0");
      tcp::Socket to_0 = tcp::connect_until(to.host, to.port, Clock::now() + 10s, "relay");
      relay(from_1, to_0, 6s);
      return;
    }
    const tcp::PairIdentity self{"g", kJobToken, 1, here + ":1"};
    try {
      tcp::connect_pair(self, 0, s->get_string("relay", 10s), Clock::now() + 4s);
    } catch (const IoError& e) {
      const std::string m = e.what();
      expect(m.find("connecting to rank 0 at") != std::string::npos &&
                 m.find("refused") != std::string::npos, m);
      return;
    }
    throw Error("rank 1 formed a link through a relay");
  }, 30s);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// A listener that does not know the token answers "accepted" with a made-up proof: the
// connecting rank refuses it, naming the rank it expected.
TEST_P(Links, AnImpersonatedRankIsRefusedByTheConnector) {
  test::StoreProcess store;
  const test::RunResult res = test::run_ranks(2, [&](int role) {
    auto s = store.connect();
    const std::string here = enter(role);
    if (role == 0) {  // the impostor, another uid
      become_nobody();
      tcp::Socket l = tcp::listen_on(here, 0);
      s->set("addr0", here + ":" + std::to_string(tcp::local_port(l)));
      tcp::Socket c = tcp::accept_until(l, Clock::now() + 10s, "impostor");
      std::vector<uint8_t> nonce(32, 7), hello(12);
      tcp::write_all(c.fd(), nonce.data(), nonce.size(), Clock::now() + 5s, "impostor");
      tcp::read_exact(c.fd(), hello.data(), 12, Clock::now() + 5s, "impostor");
      const uint32_t group_len = hello[8] | (hello[9] << 8);
      std::vector<uint8_t> rest(group_len + 72);
      tcp::read_exact(c.fd(), rest.data(), rest.size(), Clock::now() + 5s, "impostor");
      std::vector<uint8_t> reply(33, 0x5a);
      reply[0] = 1;  // "accepted"
      tcp::write_all(c.fd(), reply.data(), reply.size(), Clock::now() + 5s, "impostor");
      std::this_thread::sleep_for(1s);
      return;
    }
    const tcp::PairIdentity self{"g", kJobToken, 1, here + ":1"};
    try {
      tcp::connect_pair(self, 0, s->get_string("addr0", 10s), Clock::now() + 5s);
    } catch (const IoError& e) {
      const std::string m = e.what();
      expect(m.find("did not prove the job token") != std::string::npos &&
                 m.find("not rank 0 of this job") != std::string::npos, m);
      return;
    }
    throw Error("rank 1 linked to an impostor");
  }, 30s);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// A dialler that does not know the token claims to be rank 1 of the group, beside the real
// rank 1: rank 0 refuses it (rate-limited line on stderr) and still links to the real one, and
// the group computes the right sum.
TEST_P(Links, AnImpersonatedRankIsRefusedByTheListener) {
  test::StoreProcess store;
  const test::RunResult res = test::run_ranks(3, [&](int role) {
    auto s = store.connect();
    const std::string here = enter(role);
    if (role == 2) {  // the impostor, another uid, with a guessed token
      become_nobody();
      const std::string addr0 = unsigned_part(*s, "g/tcp/0");
      const tcp::PairIdentity fake{"g", "a-guessed-token", 1, here + ":1"};
      try {
        tcp::connect_pair(fake, 0, addr0, Clock::now() + 10s);
      } catch (const IoError& e) {
        expect(std::string(e.what()).find("refused") != std::string::npos, e.what());
        s->set("impostor-refused", "1");
        return;
      }
      throw Error("rank 0 accepted a dialler without the token");
    }
    CommunicatorOptions o;
    o.token = kJobToken;
    o.timeout = 10s;
    o.shared_memory = false;
    o.bind_address = here;
    if (role == 1) s->get("impostor-refused", 30s);  // the real rank 1 dials after the impostor
    auto c = Communicator::create(s, "g", role, 2, o);
    float x = static_cast<float>(role + 1);
    c->allreduce(&x, 1, DataType::f32, ReduceOp::sum);
    expect(x == 3.0f, "allreduce gave " + std::to_string(x));
  }, 60s);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// The attacker writes the store the ranks meet in (as any local user can torch's env://
// TCPStore): a rewritten address, or a signed one copied to another rank's key, is refused
// by the rank that reads it, naming the key; no communicator forms, nobody computes.
void rewritten_address(const Links& where, bool copy_signed) {
  test::StoreProcess store("store-token-the-attacker-has-too");
  const test::RunResult res = test::run_ranks(4, [&](int role) {
    auto s = store.connect();
    const std::string here = where.enter(role);
    if (role == 3) {  // the attacker, another uid
      become_nobody();
      const Bytes real = s->get("g/tcp/0", 30s);
      if (copy_signed) {
        s->get("g/tcp/1", 30s);  // once rank 1 published its own, before rank 2 reads it
        s->set("g/tcp/1", real);
      } else {
        tcp::Socket l = tcp::listen_on(here, 0);
        s->set("g/tcp/0", here + ":" + std::to_string(tcp::local_port(l)));
      }
      s->set("attacked", "1");
      std::this_thread::sleep_for(3s);
      return;
    }
    CommunicatorOptions o;
    o.token = kJobToken;
    o.timeout = 5s;
    o.shared_memory = false;
    o.bind_address = here;
    if (role == 2 || (role == 1 && !copy_signed)) s->get("attacked", 30s);
    try {
      auto c = Communicator::create(s, "g", role, 3, o);
      float x = 1;
      c->allreduce(&x, 1, DataType::f32, ReduceOp::sum);
      throw Error("rank " + std::to_string(role) + " formed a communicator, computed " +
                  std::to_string(x));
    } catch (const IoError& e) {
      const std::string m = e.what();
      const std::string key = copy_signed ? "'g/tcp/1'" : "'g/tcp/0'";
      expect(m.find("store key " + key) != std::string::npos &&
                 m.find("not signed with the job token") != std::string::npos, m);
    } catch (const Error& e) {
      // The ranks that never read the forged key fail when their peers do: lost or late.
      expect(role == 0 || (copy_signed && role == 1), e.what());
    }
  }, 60s);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

TEST_P(Links, ARewrittenAddressIsRefusedNamingTheKey) { rewritten_address(*this, false); }
TEST_P(Links, ASignedAddressCopiedToAnotherKeyIsRefused) { rewritten_address(*this, true); }

// 100 connections that never speak, to every rank's listener, made before the peers dial:
// handshakes run at once, so the group forms and computes (one at a time, at 10 s each, it
// took 1000 s and failed the group at its deadline).
TEST_P(Links, SilentConnectionsDoNotStarveTheRanks) {
  constexpr int kWorld = 3, kSilent = 100;
  test::StoreProcess store("store-token-the-attacker-has-too");
  const test::RunResult res = test::run_ranks(kWorld + 1, [&](int role) {
    auto s = store.connect();
    const std::string here = enter(role);
    if (role == kWorld) {  // the attacker, another uid
      become_nobody();
      std::vector<tcp::Socket> silent;
      for (int r = 0; r < kWorld - 1; ++r) {  // the last rank only dials
        const tcp::HostPort hp =
            tcp::parse_host_port(unsigned_part(*s, "g/tcp/" + std::to_string(r)), "address");
        for (int i = 0; i < kSilent; ++i)
          silent.push_back(tcp::connect_until(hp.host, hp.port, Clock::now() + 10s, "silent"));
        s->set("flooded/" + std::to_string(r), "1");
      }
      for (int r = 0; r < kWorld; ++r) s->get("done/" + std::to_string(r), 60s);
      return;
    }
    CommunicatorOptions o;
    o.token = kJobToken;
    o.timeout = 20s;  // the probe's --timeout 20: 9 silent connections failed it
    o.shared_memory = false;
    o.bind_address = here;
    if (role > 0) s->get("flooded/" + std::to_string(role - 1), 30s);
    auto c = Communicator::create(s, "g", role, kWorld, o);
    float x = static_cast<float>(role);
    c->allreduce(&x, 1, DataType::f32, ReduceOp::sum);
    expect(x == 3.0f, "allreduce gave " + std::to_string(x));
    s->set("done/" + std::to_string(role), "1");
  }, 60s);
  EXPECT_TRUE(res.all_ok()) << res.summary();
  for (const test::RankExit& r : res.ranks)
    if (r.rank < kWorld) {
      EXPECT_LT(r.seconds, 20) << res.summary();
    }
}

// A shared-memory segment another user made, even one open to all, is never mapped.
TEST(LinkSecurity, ASegmentOfAnotherUserIsRefused) {
  const std::string name = "/heft-test-planted-" + std::to_string(getpid());
  const test::RunResult planted = test::run_ranks(1, [&](int) {
    become_nobody();
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0666);
    expect(fd >= 0 && fchmod(fd, 0666) == 0 && ftruncate(fd, 1 << 20) == 0, "cannot plant");
    close(fd);
  });
  ASSERT_TRUE(planted.all_ok()) << planted.summary();
  try {
    shm::Segment::open(name, 4096);
    ADD_FAILURE() << "a segment of uid " << kNobody << " was mapped";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to uid 65534 with mode 666"), std::string::npos)
        << e.what();
  }
  shm_unlink(name.c_str());
}

// Refusals are counted, and reported on stderr at most once a second: never on stdout.
TEST(LinkSecurity, RefusalsGoToStderrRateLimitedAndCounted) {
  const uint64_t before = refused_connections();
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; ++i) log_refused("test", "127.0.0.1", "wrong job token");
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(refused_connections() - before, 1000u);
  EXPECT_EQ(out, "");
  EXPECT_NE(err.find("test: refused a connection from 127.0.0.1: wrong job token"), std::string::npos)
      << err;
  EXPECT_LE(std::count(err.begin(), err.end(), '\n'), 2) << err;
}

}  // namespace
}  // namespace heft::comm
