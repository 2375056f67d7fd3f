// ctest-labels: unit
// What only the TCP store has: the token handshake (both directions), the server's
// resilience to clients that stall or send garbage, and what clients see when the server
// goes away. RawClient speaks the bytes of docs/store-protocol.md by hand, so these tests
// also pin the documented wire format.
// Deliberately left out: the Store contract itself (store_test.cc) and forked processes
// (tcp_store_multiproc_test.cc).
#include "heft/comm/store/tcp_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/auth.h"
#include "heft/comm/transport/tcp/socket.h"
#include "heft/error.h"

namespace heft::comm {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

const std::string kToken = "the-job-token";

TcpStoreServerOptions options() { return TcpStoreServerOptions{"127.0.0.1", 0, kToken}; }

double seconds_since(steady_clock::time_point t0) {
  return std::chrono::duration<double>(steady_clock::now() - t0).count();
}

tcp::Deadline in_seconds(int s) { return tcp::Clock::now() + std::chrono::seconds(s); }

void put_u32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A client written from docs/store-protocol.md, byte by byte.
class RawClient {
 public:
  explicit RawClient(int port)
      : sock_(tcp::connect_until("127.0.0.1", port, in_seconds(10), "raw client")) {}

  // Reads the server hello and proves `token`; returns the verdict byte.
  uint8_t hello(const std::string& token) {
    uint8_t server_hello[37];
    read(server_hello, sizeof(server_hello));
    EXPECT_EQ(std::memcmp(server_hello, "HFSS", 4), 0);
    EXPECT_EQ(server_hello[4], 1);
    Nonce nonce;
    std::memcpy(nonce.data(), server_hello + 5, nonce.size());
    Bytes answer = {'H', 'F', 'S', 'C', 1};
    Mac mac = auth_mac(token, "heft-store", nonce);
    answer.insert(answer.end(), mac.begin(), mac.end());
    Nonce mine = random_nonce();
    answer.insert(answer.end(), mine.begin(), mine.end());
    send(answer);
    uint8_t verdict = 0xff;
    read(&verdict, 1);
    if (verdict == 0) {
      Mac proof;
      read(proof.data(), proof.size());
      EXPECT_TRUE(mac_equal(proof, auth_mac(token, "heft-store-server", mine)));
    }
    return verdict;
  }

  void send(const Bytes& b) {
    tcp::write_all(sock_.fd(), b.data(), b.size(), in_seconds(10), "raw client");
  }
  void read(void* p, size_t n) { tcp::read_exact(sock_.fd(), p, n, in_seconds(10), "raw client"); }

  // Reads one response frame; returns its status, the body in *body.
  uint8_t response(Bytes* body) {
    uint8_t header[5];
    read(header, 5);
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t{header[1 + i]} << (8 * i);
    body->resize(n);
    read(body->data(), n);
    return header[0];
  }

  // True when the server closed the connection (EOF within a few seconds).
  bool closed_by_server() {
    uint8_t b;
    try {
      read(&b, 1);
      return false;
    } catch (const tcp::ConnectionClosed&) {
      return true;
    }
  }

 private:
  tcp::Socket sock_;
};

TEST(TcpStoreTest, ServerBindsTheGivenAddressAndAPickedPort) {
  TcpStoreServer server(options());
  EXPECT_EQ(server.address(), "127.0.0.1");
  EXPECT_GT(server.port(), 0);
  EXPECT_EQ(server.refused_connections(), 0);
}

TEST(TcpStoreTest, EmptyTokenIsInvalidArgument) {
  EXPECT_THROW(TcpStoreServer(TcpStoreServerOptions{"127.0.0.1", 0, ""}), InvalidArgument);
}

TEST(TcpStoreTest, ConnectParsesHostPort) {
  TcpStoreServer server(options());
  auto store = TcpStore::connect("127.0.0.1:" + std::to_string(server.port()), kToken);
  store->set("k", std::string("v"));
  EXPECT_EQ(store->get_string("k"), "v");
  EXPECT_EQ(store->local_address(), "127.0.0.1");
  EXPECT_THROW(TcpStore::connect("no-port-here", kToken), InvalidArgument);
}

TEST(TcpStoreTest, WrongTokenIsRefusedAndCounted) {
  TcpStoreServer server(options());
  try {
    TcpStore bad("127.0.0.1", server.port(), "not-the-token");
    FAIL() << "a client with a wrong token was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("refused the job token"), std::string::npos) << msg;
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << msg;
  }
  EXPECT_EQ(server.refused_connections(), 1);
  TcpStore good("127.0.0.1", server.port(), kToken);  // the server still serves others
  EXPECT_EQ(good.add("n", 1), 1);
  EXPECT_EQ(server.refused_connections(), 1);
}

TEST(TcpStoreTest, RawClientWithWrongTokenGetsRefusalThenClose) {
  TcpStoreServer server(options());
  RawClient raw(server.port());
  EXPECT_EQ(raw.hello("wrong"), 3);
  EXPECT_TRUE(raw.closed_by_server());
  EXPECT_EQ(server.refused_connections(), 1);
}

TEST(TcpStoreTest, ClientRefusesAServerThatCannotProveTheToken) {
  tcp::Socket listener = tcp::listen_on("127.0.0.1", 0);
  const int port = tcp::local_port(listener);
  std::thread impostor([&] {
    tcp::Socket s = tcp::accept_until(listener, in_seconds(10), "impostor");
    Bytes hello = {'H', 'F', 'S', 'S', 1};
    Nonce n = random_nonce();
    hello.insert(hello.end(), n.begin(), n.end());
    tcp::write_all(s.fd(), hello.data(), hello.size(), in_seconds(10), "impostor");
    uint8_t answer[69];
    tcp::read_exact(s.fd(), answer, sizeof(answer), in_seconds(10), "impostor");
    Bytes verdict = {0};
    Nonce fake = random_nonce();  // not a MAC of the client's nonce under the token
    verdict.insert(verdict.end(), fake.begin(), fake.end());
    tcp::write_all(s.fd(), verdict.data(), verdict.size(), in_seconds(10), "impostor");
  });
  try {
    TcpStore store("127.0.0.1", port, kToken);
    FAIL() << "the client accepted an impostor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove"), std::string::npos) << e.what();
  }
  impostor.join();
}

TEST(TcpStoreTest, ConnectRetriesUntilTheServerComesUp) {
  int port = 0;
  {
    tcp::Socket probe = tcp::listen_on("127.0.0.1", 0);  // a free port, released again
    port = tcp::local_port(probe);
  }
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(300));
    server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{"127.0.0.1", port, kToken});
  });
  TcpStore store("127.0.0.1", port, kToken, std::chrono::seconds(20));
  late.join();
  EXPECT_EQ(store.add("n", 1), 1);
}

TEST(TcpStoreTest, ConnectTimesOutWhenNoServerComes) {
  int port = 0;
  {
    tcp::Socket probe = tcp::listen_on("127.0.0.1", 0);
    port = tcp::local_port(probe);
  }
  const auto t0 = steady_clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", port, kToken, milliseconds(400)), Timeout);
  EXPECT_GE(seconds_since(t0), 0.4);
  EXPECT_LT(seconds_since(t0), 0.4 + 3.0);
}

TEST(TcpStoreTest, ServerSurvivesGarbageBeforeTheHandshake) {
  TcpStoreServer server(options());
  {
    RawClient raw(server.port());
    Bytes garbage(69);
    for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 37 + 11);
    raw.send(garbage);
    uint8_t hello[37];
    raw.read(hello, sizeof(hello));
    uint8_t verdict = 0;
    raw.read(&verdict, 1);
    EXPECT_EQ(verdict, 4);  // bad request: not a heft store client
    EXPECT_TRUE(raw.closed_by_server());
  }
  TcpStore store("127.0.0.1", server.port(), kToken);
  EXPECT_EQ(store.add("n", 1), 1);
  EXPECT_EQ(server.refused_connections(), 0);
}

TEST(TcpStoreTest, ServerClosesAnAuthenticatedClientThatSendsAHugeLength) {
  TcpStoreServer server(options());
  RawClient raw(server.port());
  ASSERT_EQ(raw.hello(kToken), 0);
  Bytes frame = {1};  // set, with a body length far over the 64 MiB limit
  put_u32(frame, 0xffffffffu);
  raw.send(frame);
  Bytes body;
  EXPECT_EQ(raw.response(&body), 4);
  EXPECT_NE(std::string(body.begin(), body.end()).find("exceeds"), std::string::npos);
  EXPECT_TRUE(raw.closed_by_server());
  TcpStore store("127.0.0.1", server.port(), kToken);
  EXPECT_EQ(store.add("n", 1), 1);
}

TEST(TcpStoreTest, ServerAnswersMalformedBodiesWithBadRequest) {
  TcpStoreServer server(options());
  for (Bytes frame : {Bytes{99, 0, 0, 0, 0},            // unknown opcode
                      Bytes{1, 3, 0, 0, 0, 200, 0, 0},  // set: key length past the body
                      Bytes{5, 5, 0, 0, 0, 1, 0, 0, 0, 'k'} /* delete: fine */}) {
    RawClient raw(server.port());
    ASSERT_EQ(raw.hello(kToken), 0);
    raw.send(frame);
    Bytes body;
    uint8_t status = raw.response(&body);
    if (frame[0] == 5) {
      EXPECT_EQ(status, 0);
      EXPECT_EQ(body, Bytes{0});  // the key did not exist
    } else {
      EXPECT_EQ(status, 4);
      EXPECT_TRUE(raw.closed_by_server());
    }
  }
  TcpStore store("127.0.0.1", server.port(), kToken);
  EXPECT_EQ(store.add("n", 1), 1);
}

TEST(TcpStoreTest, SilentAndHalfSentClientsDoNotStallOthers) {
  TcpStoreServer server(options());
  RawClient silent(server.port());  // never says hello
  RawClient half(server.port());
  ASSERT_EQ(half.hello(kToken), 0);
  half.send(Bytes{1, 100, 0, 0, 0, 4});  // a set frame cut short
  TcpStore store("127.0.0.1", server.port(), kToken);
  const auto t0 = steady_clock::now();
  for (int i = 0; i < 100; ++i) store.add("n", 1);
  EXPECT_EQ(store.get_string("n"), "100");
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(TcpStoreTest, ClientThatNeverReadsDoesNotStallOthers) {
  TcpStoreServer server(options());
  TcpStore store("127.0.0.1", server.port(), kToken);
  store.set("big", Bytes(8 << 20, 0x5a));
  RawClient greedy(server.port());
  ASSERT_EQ(greedy.hello(kToken), 0);
  Bytes get = {2};  // get "big", timeout 0, sent 20 times and never read
  put_u32(get, 8 + 4 + 3);
  for (int i = 0; i < 8; ++i) get.push_back(0);
  put_u32(get, 3);
  get.insert(get.end(), {'b', 'i', 'g'});
  for (int i = 0; i < 20; ++i) greedy.send(get);
  std::this_thread::sleep_for(milliseconds(200));
  const auto t0 = steady_clock::now();
  for (int i = 0; i < 100; ++i) store.add("n", 1);
  EXPECT_EQ(store.get("big", milliseconds(1000)).size(), size_t{8} << 20);
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(TcpStoreTest, ParkedGetDoesNotStallOtherClients) {
  TcpStoreServer server(options());
  TcpStore waiter("127.0.0.1", server.port(), kToken);
  TcpStore other("127.0.0.1", server.port(), kToken);
  std::thread blocked([&] { EXPECT_EQ(waiter.get_string("late", milliseconds(10000)), "x"); });
  std::this_thread::sleep_for(milliseconds(100));
  for (int i = 0; i < 50; ++i) other.add("busy", 1);
  other.set("late", std::string("x"));
  blocked.join();
}

TEST(TcpStoreTest, DestructorReturnsPromptlyWithClientsConnectedAndWaiting) {
  auto server = std::make_unique<TcpStoreServer>(options());
  TcpStore idle("127.0.0.1", server->port(), kToken);
  TcpStore waiter("127.0.0.1", server->port(), kToken);
  RawClient silent(server->port());
  bool got_peer_lost = false;
  std::thread blocked([&] {
    try {
      waiter.get("never", milliseconds(60000));
    } catch (const PeerLost&) {
      got_peer_lost = true;
    }
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto t0 = steady_clock::now();
  server.reset();
  EXPECT_LT(seconds_since(t0), 1.0);
  blocked.join();
  EXPECT_TRUE(got_peer_lost);
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(TcpStoreTest, ClientOfADeadServerGetsPeerLostOnEveryLaterCall) {
  auto server = std::make_unique<TcpStoreServer>(options());
  TcpStore store("127.0.0.1", server->port(), kToken);
  store.set("k", std::string("v"));
  server.reset();
  const auto t0 = steady_clock::now();
  try {
    store.get("k", milliseconds(60000));
    FAIL() << "get on a dead server returned";
  } catch (const PeerLost& e) {
    EXPECT_EQ(e.peer(), -1);
    EXPECT_EQ(e.op(), "store get");
    EXPECT_NE(std::string(e.what()).find("store at 127.0.0.1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store.add("n", 1), PeerLost);
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(TcpStoreTest, RawWaitFrameIsAnsweredWhenTheKeyAppears) {
  TcpStoreServer server(options());
  RawClient raw(server.port());
  ASSERT_EQ(raw.hello(kToken), 0);
  Bytes wait = {6};  // wait, 10 s, keys ["k"]
  put_u32(wait, 8 + 4 + 4 + 1);
  for (uint64_t ms = 10000, i = 0; i < 8; ++i) wait.push_back(static_cast<uint8_t>(ms >> (8 * i)));
  put_u32(wait, 1);
  put_u32(wait, 1);
  wait.push_back('k');
  raw.send(wait);
  TcpStore store("127.0.0.1", server.port(), kToken);
  store.set("k", std::string("v"));
  Bytes body;
  EXPECT_EQ(raw.response(&body), 0);
  EXPECT_TRUE(body.empty());
}

// The probe's flood: one authenticated WAIT of far more keys than any job waits on. It is
// refused as soon as its key count is read (BAD_REQUEST naming the limit), and a parked
// WAIT of the most keys allowed, whose first key never comes, costs the other clients'
// sets one lookup each, not a pass over its keys.
TEST(TcpStoreTest, AFloodOfKeysIsRefusedAndAParkedManyKeyWaitLetsOthersWork) {
  TcpStoreServer server(options());
  auto wait_frame = [](uint32_t count, uint32_t declared) {
    Bytes f = {6};
    put_u32(f, static_cast<uint32_t>(8 + 4 + count * 5));
    for (uint64_t ms = 60000, i = 0; i < 8; ++i) f.push_back(static_cast<uint8_t>(ms >> (8 * i)));
    put_u32(f, declared);
    for (uint32_t i = 0; i < count; ++i) {
      put_u32(f, 1);
      f.push_back(static_cast<uint8_t>('a' + i % 26));
    }
    return f;
  };
  {
    RawClient flood(server.port());
    ASSERT_EQ(flood.hello(kToken), 0);
    flood.send(wait_frame(1, 13400000));  // declares 13.4 M keys
    Bytes body;
    EXPECT_EQ(flood.response(&body), 4);
    EXPECT_NE(std::string(body.begin(), body.end()).find("exceed the limit of 65536"),
              std::string::npos);
    EXPECT_TRUE(flood.closed_by_server());
  }
  RawClient parked(server.port());
  ASSERT_EQ(parked.hello(kToken), 0);
  Bytes many = {6};
  const uint32_t n = 65536;  // wire::kMaxKeysPerRequest
  put_u32(many, 8 + 4 + n * (4 + 8));
  for (uint64_t ms = 60000, i = 0; i < 8; ++i) many.push_back(static_cast<uint8_t>(ms >> (8 * i)));
  put_u32(many, n);
  for (uint32_t i = 0; i < n; ++i) {
    char k[9];
    std::snprintf(k, sizeof(k), "w%07u", i);
    put_u32(many, 8);
    many.insert(many.end(), k, k + 8);
  }
  parked.send(many);
  TcpStore store("127.0.0.1", server.port(), kToken);
  EXPECT_THROW(store.wait(std::vector<std::string>(n + 1, "k"), milliseconds(10)), InvalidArgument);
  // Every key but the first: each set looks at key 0 of the parked request and moves on.
  for (uint32_t i = 1; i < n; i += 997) {
    char k[9];
    std::snprintf(k, sizeof(k), "w%07u", i);
    store.set(k, std::string("v"));
  }
  EXPECT_EQ(store.add("n", 1), 1);
}

// The exchange printed at the end of docs/store-protocol.md, byte for byte.
// The values a client wrote are bounded (a key is charged to its last writer), and so is the
// whole store: a write over either limit is refused naming it, stores nothing, and the client
// and the others go on. Rewriting, deleting or another client taking a key over frees its charge.
TEST(TcpStoreTest, MemoryPerClientAndInAllIsBounded) {
  TcpStoreServerOptions o = options();
  o.max_client_bytes = 1 << 20;
  o.max_total_bytes = 3 << 19;  // 1.5 MiB
  TcpStoreServer server(o);
  TcpStore a("127.0.0.1", server.port(), kToken), b("127.0.0.1", server.port(), kToken);
  const Bytes kib100(100 << 10, 'x');
  for (int i = 0; i < 10; ++i) a.set("a/" + std::to_string(i), kib100);  // 1000 KiB + keys
  try {
    a.set("a/10", kib100);
    FAIL() << "a client stored more than its limit";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("over the server's limit of 1 MiB a client"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(a.check({"a/10"}));
  a.set("a/0", kib100);  // a rewrite is charged once
  a.add("a/n", 1);       // a counter is small
  for (int i = 0; i < 5; ++i) b.set("b/" + std::to_string(i), kib100);
  try {
    b.set("b/5", kib100);
    FAIL() << "the store grew past its limit";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("would take the store to"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(a.delete_key("a/9"));
  b.set("b/5", kib100);  // the delete freed room
  b.set("a/8", Bytes(1, 'y'));  // b takes a/8 over: a's charge goes with it
  a.set("a/10", Bytes(50 << 10, 'z'));
  EXPECT_EQ(b.get("a/10", std::chrono::seconds(1)).size(), size_t{50} << 10);
}

TEST(TcpStoreTest, DocumentedExchangeIsWhatTheServerSpeaks) {
  TcpStoreServer server(options());
  TcpStore store("127.0.0.1", server.port(), kToken);
  store.set("n", std::string("2"));
  store.set("a", std::string("x"));
  RawClient raw(server.port());
  ASSERT_EQ(raw.hello(kToken), 0);
  raw.send(Bytes{0x03, 0x0d, 0, 0, 0, 0x01, 0, 0, 0, 'n', 0x05, 0, 0, 0, 0, 0, 0, 0});
  uint8_t add_reply[13];
  raw.read(add_reply, sizeof(add_reply));
  EXPECT_EQ(Bytes(add_reply, add_reply + 13), (Bytes{0, 8, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0}));
  raw.send(Bytes{0x06, 0x16, 0, 0,    0, 0xdc, 0x05, 0,   0,    0, 0, 0, 0,  0x02,
                 0,    0,    0, 0x01, 0, 0,    0,    'a', 0x01, 0, 0, 0, 'b'});
  uint8_t wait_reply[14];
  raw.read(wait_reply, sizeof(wait_reply));
  EXPECT_EQ(Bytes(wait_reply, wait_reply + 14),
            (Bytes{0x01, 0x09, 0, 0, 0, 0x01, 0, 0, 0, 0x01, 0, 0, 0, 'b'}));
  EXPECT_EQ(store.get_string("n"), "7");
}

}  // namespace
}  // namespace heft::comm
