#include "heft/profile/console_guard.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "heft/error.h"

namespace heft::profile {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_ipv4(const std::string& s) {
  in_addr a{};
  return inet_pton(AF_INET, s.c_str(), &a) == 1;
}

bool is_ipv6(const std::string& s) {
  in6_addr a{};
  return inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

// The name part of a Host header or of an Origin's authority, and its port (-1: none);
// nullopt when it cannot be parsed.
std::optional<std::pair<std::string, int>> split_host_port(const std::string& s) {
  std::string name, port;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find(']');
    if (close == std::string::npos) return std::nullopt;
    name = s.substr(1, close - 1);
    const std::string rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return std::nullopt;
      port = rest.substr(1);
    }
  } else if (std::count(s.begin(), s.end(), ':') > 1) {
    name = s;  // a bare IPv6 address
  } else {
    const size_t colon = s.find(':');
    name = s.substr(0, colon);
    if (colon != std::string::npos) port = s.substr(colon + 1);
  }
  if (name.empty()) return std::nullopt;
  int p = -1;
  if (!port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit)) return std::nullopt;
    p = std::stoi(port);
  }
  return std::make_pair(lower(name), p);
}

}  // namespace

std::string random_token() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    throw IoError("heft console: the random generator failed (OpenSSL RAND_bytes)");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

bool secrets_equal(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty() || a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::optional<std::string> cookie_value(const std::string& header, const std::string& name) {
  size_t i = 0;
  while (i < header.size()) {
    size_t end = header.find(';', i);
    if (end == std::string::npos) end = header.size();
    std::string part = header.substr(i, end - i);
    const size_t first = part.find_first_not_of(' ');
    part = first == std::string::npos ? "" : part.substr(first);
    const size_t eq = part.find('=');
    if (eq != std::string::npos && part.compare(0, eq, name) == 0 && eq == name.size())
      return part.substr(eq + 1);
    i = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> bearer_token(const std::string& header) {
  static const std::string kPrefix = "Bearer ";
  if (header.size() <= kPrefix.size() || header.compare(0, kPrefix.size(), kPrefix) != 0)
    return std::nullopt;
  return header.substr(kPrefix.size());
}

bool valid_console_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || !std::isalnum(static_cast<unsigned char>(name[0])))
    return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  return name.find("..") == std::string::npos;
}

bool is_loopback_host(const std::string& host) {
  const std::string h = lower(host);
  if (h == "localhost") return true;
  if (is_ipv4(h)) return h.rfind("127.", 0) == 0;
  in6_addr a{};
  if (inet_pton(AF_INET6, h.c_str(), &a) == 1) return IN6_IS_ADDR_LOOPBACK(&a);
  return false;
}

bool is_wildcard_host(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]";
}

HostPolicy::HostPolicy(std::string bound, std::vector<std::string> extra) {
  names_ = {"localhost", "127.0.0.1", "::1"};
  if (auto b = split_host_port(bound)) names_.push_back(b->first);
  for (const std::string& e : extra)
    if (auto n = split_host_port(e)) names_.push_back(n->first);
  if (is_wildcard_host(bound)) {
    any_ip_literal_ = true;
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0 && name[0]) names_.push_back(lower(name));
  }
}

bool HostPolicy::allows_name(const std::string& name) const {
  if (std::find(names_.begin(), names_.end(), name) != names_.end()) return true;
  return any_ip_literal_ && (is_ipv4(name) || is_ipv6(name));
}

bool HostPolicy::allows(const std::string& host_header) const {
  auto hp = split_host_port(host_header);
  return hp && allows_name(hp->first);
}

bool HostPolicy::allows_origin(const std::string& origin, int port) const {
  int default_port = 0;
  std::string rest;
  if (origin.rfind("http://", 0) == 0) {
    default_port = 80;
    rest = origin.substr(7);
  } else if (origin.rfind("https://", 0) == 0) {
    default_port = 443;
    rest = origin.substr(8);
  } else {
    return false;  // "null" (sandboxed frames, file:) and other schemes
  }
  if (rest.find('/') != std::string::npos) return false;
  auto hp = split_host_port(rest);
  if (!hp) return false;
  const int p = hp->second < 0 ? default_port : hp->second;
  return p == port && allows_name(hp->first);
}

nlohmann::json without_environment_values(nlohmann::json j) {
  if (j.is_array()) {
    for (nlohmann::json& x : j) x = without_environment_values(std::move(x));
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "environment" && it.value().is_object()) {
        nlohmann::json names = nlohmann::json::array();
        for (auto e = it.value().begin(); e != it.value().end(); ++e) names.push_back(e.key());
        it.value() = std::move(names);  // nlohmann's objects iterate in sorted order
      } else {
        it.value() = without_environment_values(std::move(it.value()));
      }
    }
  }
  return j;
}

}  // namespace heft::profile
