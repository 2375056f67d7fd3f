// MemoryStore: a map under one mutex; blocking calls sleep on a condition variable that
// every set and add notifies. Counters are decimal text so that get() of a counter reads
// the same on every store.
#include "heft/comm/store/memory_store.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "heft/error.h"

namespace heft::comm {

namespace {

constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxValueBytes = size_t{64} << 20;

// A caller may pass Millis::max() for "forever"; wait_for adds it to now() and would
// overflow, so waits are capped at a year.
Millis bounded(Millis t) { return std::min(t, Millis(std::chrono::hours(24 * 365))); }

void check_key(const std::string& key, const char* verb) {
  if (key.empty()) throw InvalidArgument(std::string("store ") + verb + ": empty key");
  if (key.size() > kMaxKeyBytes)
    throw InvalidArgument(std::string("store ") + verb + ": key of " + std::to_string(key.size()) +
                          " bytes, at most " + std::to_string(kMaxKeyBytes) + " allowed");
}

void check_keys(const std::vector<std::string>& keys, const char* verb) {
  for (const auto& k : keys) check_key(k, verb);
}

// Strict decimal int64: optional '-', digits only, no overflow.
bool parse_int64(const Bytes& value, int64_t* out) {
  std::string text(value.begin(), value.end());
  if (text.empty() || text.size() > 20) return false;
  size_t digits_from = text[0] == '-' ? 1 : 0;
  if (digits_from == text.size()) return false;
  for (size_t i = digits_from; i < text.size(); ++i)
    if (text[i] < '0' || text[i] > '9') return false;
  errno = 0;
  long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  *out = v;
  return true;
}

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

std::string timeout_message(const char* verb, const std::vector<std::string>& missing,
                            Millis timeout) {
  return std::string("store ") + verb + ": " + (missing.size() == 1 ? "key " : "keys ") +
         quoted_list(missing) + " not set within " + std::to_string(timeout.count()) +
         " ms (memory store)";
}

}  // namespace

void MemoryStore::set(const std::string& key, const Bytes& value) {
  check_key(key, "set");
  if (value.size() > kMaxValueBytes)
    throw InvalidArgument("store set: value of " + std::to_string(value.size()) +
                          " bytes for key '" + key + "', at most 64 MiB allowed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, Millis timeout) {
  check_key(key, "get");
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return values_.count(key) > 0; };
  if (!changed_.wait_for(lock, bounded(timeout), ready))
    throw Timeout(timeout_message("get", {key}, timeout));
  return values_.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  check_key(key, "add");
  int64_t sum = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t now = 0;
    auto it = values_.find(key);
    if (it != values_.end() && !parse_int64(it->second, &now))
      throw InvalidArgument("store add: key '" + key + "' holds a value that is not a " +
                            "decimal 64-bit integer");
    if (__builtin_add_overflow(now, delta, &sum))
      throw InvalidArgument("store add: key '" + key + "' would overflow 64 bits (" +
                            std::to_string(now) + " + " + std::to_string(delta) + ")");
    std::string text = std::to_string(sum);
    values_[key] = Bytes(text.begin(), text.end());
  }
  changed_.notify_all();
  return sum;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  check_keys(keys, "check");
  std::lock_guard<std::mutex> lock(mu_);
  return missing_locked(keys).empty();
}

bool MemoryStore::delete_key(const std::string& key) {
  check_key(key, "delete");
  std::lock_guard<std::mutex> lock(mu_);
  return values_.erase(key) > 0;
}

void MemoryStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  check_keys(keys, "wait");
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return missing_locked(keys).empty(); };
  if (!changed_.wait_for(lock, bounded(timeout), ready))
    throw Timeout(timeout_message("wait", missing_locked(keys), timeout));
}

std::optional<Bytes> MemoryStore::try_get(const std::string& key) {
  check_key(key, "get");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> MemoryStore::missing(const std::vector<std::string>& keys) {
  check_keys(keys, "wait");
  std::lock_guard<std::mutex> lock(mu_);
  return missing_locked(keys);
}

std::vector<std::string> MemoryStore::missing_locked(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (values_.count(k) == 0) out.push_back(k);
  return out;
}

}  // namespace heft::comm
