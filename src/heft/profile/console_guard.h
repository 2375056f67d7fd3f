// The web console's checks on each request, as plain functions (console_server.cc applies
// them before any route runs): the token, the session cookie, the Host and Origin headers,
// names that become paths, and what a response may say about a job's environment.
//
// Nothing here does I/O but random_token() (OpenSSL's RAND_bytes). All functions are
// thread-safe; HostPolicy is immutable once made.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace heft::profile {

// 32 random bytes as 64 hexadecimal digits (OpenSSL RAND_bytes); throws heft::IoError when
// the generator fails.
std::string random_token();

// a == b in time that depends on their lengths only, never on where they differ
// (CRYPTO_memcmp). Two empty strings are never equal: an empty secret matches nothing.
bool secrets_equal(const std::string& a, const std::string& b);

// The value of cookie `name` in a Cookie request header ("a=1; b=2"), if present.
std::optional<std::string> cookie_value(const std::string& cookie_header, const std::string& name);

// The token of an `Authorization: Bearer TOKEN` header; nullopt for any other form.
std::optional<std::string> bearer_token(const std::string& authorization_header);

// A job or tuning name as the console accepts it in a path: 1 to 128 characters of
// [A-Za-z0-9._-], starting with a letter or digit, without "..". Checked before any
// database lookup or path is built, so "%2e%2e", "a/../b" and "." are all refused.
bool valid_console_name(const std::string& name);

// True for the loopback addresses and names: 127.0.0.0/8, ::1, localhost.
bool is_loopback_host(const std::string& host);

// True for an address that listens on every interface (0.0.0.0, ::).
bool is_wildcard_host(const std::string& host);

// Which Host headers (and Origins) the console answers: a page whose name was rebound to
// 127.0.0.1 (DNS rebinding) sends its own name as Host and is refused.
class HostPolicy {
 public:
  // bound: the address listened on; extra: the names given with --allow-host.
  // Always allowed: localhost, 127.0.0.1, ::1, the bound address. When bound to every
  // interface (0.0.0.0 or ::), also this machine's host name and any IP literal (a page
  // cannot rebind an IP literal: the browser connects to that address itself).
  HostPolicy(std::string bound, std::vector<std::string> extra);
  // `host_header`: "name", "name:port", "[v6]" or "[v6]:port". The name part is compared
  // case-insensitively; the port is not checked.
  bool allows(const std::string& host_header) const;
  // An Origin header ("http://name:port", "https://..."): its host must be allowed and its
  // port must be `port`. "null" and anything unparsable are refused.
  bool allows_origin(const std::string& origin, int port) const;
  const std::vector<std::string>& names() const { return names_; }

 private:
  bool allows_name(const std::string& name) const;
  std::vector<std::string> names_;  // lower case, IPv6 without brackets
  bool any_ip_literal_ = false;
};

// `j` with every object member named "environment" that is itself an object replaced by
// the sorted array of its names: environment values are never served (they may hold keys).
nlohmann::json without_environment_values(nlohmann::json j);

}  // namespace heft::profile
