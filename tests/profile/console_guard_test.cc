// ctest-labels: unit
// The console's request checks (profile/console_guard.h) on the inputs a probe tried: Host
// names of a rebound page, cross-site Origins, names that climb out of a folder, tokens that
// differ late or in length, cookies with look-alike names, environment values nested in a
// tuning's trials. The server applying them is tested end to end in
// tests/python/console_security_test.py.
#include "heft/profile/console_guard.h"

#include <gtest/gtest.h>

namespace heft::profile {
namespace {

TEST(ConsoleGuard, SecretsEqualOnlyWhenIdenticalAndNonEmpty) {
  const std::string t = random_token();
  EXPECT_EQ(t.size(), 64u);
  EXPECT_NE(t, random_token());
  EXPECT_TRUE(secrets_equal(t, std::string(t)));
  std::string late = t;
  late.back() = late.back() == 'a' ? 'b' : 'a';
  EXPECT_FALSE(secrets_equal(t, late));
  EXPECT_FALSE(secrets_equal(t, t.substr(0, 63)));
  EXPECT_FALSE(secrets_equal(t, t + "0"));
  EXPECT_FALSE(secrets_equal("", ""));
}

TEST(ConsoleGuard, CookieAndBearer) {
  EXPECT_EQ(cookie_value("a=1; heft_console_80=xyz; b=2", "heft_console_80"), "xyz");
  EXPECT_EQ(cookie_value("heft_console_8080=no", "heft_console_80"), std::nullopt);
  EXPECT_EQ(cookie_value("xheft_console_80=no", "heft_console_80"), std::nullopt);
  EXPECT_EQ(cookie_value("", "heft_console_80"), std::nullopt);
  EXPECT_EQ(bearer_token("Bearer abc"), "abc");
  EXPECT_EQ(bearer_token("Basic abc"), std::nullopt);
  EXPECT_EQ(bearer_token("Bearer "), std::nullopt);
}

TEST(ConsoleGuard, NamesThatCouldBecomePathsAreRefused) {
  for (const char* ok : {"job", "envtune-001", "a.b_c-D9", "9"})
    EXPECT_TRUE(valid_console_name(ok)) << ok;
  for (const char* bad : {"", ".", "..", ".hidden", "-x", "a/b", "../jobs", "a..", "x..y", "%2e%2e",
                          "a b", "a\\b", "\xc3\xa9"})
    EXPECT_FALSE(valid_console_name(bad)) << bad;
  EXPECT_TRUE(valid_console_name(std::string(128, 'a')));
  EXPECT_FALSE(valid_console_name(std::string(129, 'a')));
}

TEST(ConsoleGuard, Loopback) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "localhost", "LocalHost"})
    EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "10.0.0.1", "localhost.evil.example", "128.0.0.1"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
}

TEST(ConsoleGuard, HostPolicyRefusesRebindingNames) {
  const HostPolicy p("127.0.0.1", {"console.example"});
  for (const char* h : {"127.0.0.1:8686", "localhost", "LOCALHOST:1", "[::1]:8686",
                        "console.example:8686"})
    EXPECT_TRUE(p.allows(h)) << h;
  for (const char* h : {"", "evil.example", "evil.example:8686", "127.0.0.1.evil.example",
                        "10.0.0.5", "[::1", "localhost:abc", ":8686"})
    EXPECT_FALSE(p.allows(h)) << h;
  EXPECT_TRUE(p.allows_origin("http://127.0.0.1:8686", 8686));
  EXPECT_TRUE(p.allows_origin("http://localhost:8686", 8686));
  EXPECT_FALSE(p.allows_origin("http://127.0.0.1:8687", 8686));
  EXPECT_FALSE(p.allows_origin("http://evil.example:8686", 8686));
  EXPECT_FALSE(p.allows_origin("null", 8686));
  EXPECT_FALSE(p.allows_origin("http://127.0.0.1:8686/x", 8686));
  EXPECT_TRUE(p.allows_origin("https://console.example", 443));
}

TEST(ConsoleGuard, WildcardBindingAllowsIpLiteralsNotNames) {
  const HostPolicy p("0.0.0.0", {});
  EXPECT_TRUE(p.allows("10.0.0.5:8686"));
  EXPECT_TRUE(p.allows("[fe80::1]:8686"));
  EXPECT_FALSE(p.allows("evil.example:8686"));
  const HostPolicy loop("127.0.0.1", {});
  EXPECT_FALSE(loop.allows("10.0.0.5:8686"));
}

TEST(ConsoleGuard, EnvironmentValuesBecomeNamesAtAnyDepth) {
  nlohmann::json j = {
      {"spec", {{"environment", {{"B_KEY", "secret-b"}, {"A_KEY", "secret-a"}}}}},
      {"trials", {{{"spec", {{"environment", {{"C", "secret-c"}}}}}}}},
      {"environment", "a string is left alone"}};
  const nlohmann::json out = without_environment_values(j);
  EXPECT_EQ(out["spec"]["environment"], nlohmann::json({"A_KEY", "B_KEY"}));
  EXPECT_EQ(out["trials"][0]["spec"]["environment"], nlohmann::json({"C"}));
  EXPECT_EQ(out["environment"], "a string is left alone");
  EXPECT_EQ(out.dump().find("secret"), std::string::npos);
}

}  // namespace
}  // namespace heft::profile
