// PrefixStore: forwards every call to the base store with prefixed keys.
#include "heft/comm/store/prefix_store.h"

#include <utility>

#include "heft/error.h"

namespace heft::comm {

namespace {
std::shared_ptr<Store> non_null(std::shared_ptr<Store> base, const std::string& prefix) {
  if (!base) throw InvalidArgument("PrefixStore '" + prefix + "': base store is null");
  return base;
}
}  // namespace

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(non_null(std::move(base), prefix_)) {
  set_timeout(base_->timeout());
}

void PrefixStore::set(const std::string& key, const Bytes& value) {
  base_->set(prefixed(key), value);
}

Bytes PrefixStore::get(const std::string& key, Millis timeout) {
  return base_->get(prefixed(key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(prefixed(key), delta);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_->check(prefixed(keys));
}

bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(prefixed(key)); }

void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  base_->wait(prefixed(keys), timeout);
}

std::string PrefixStore::prefixed(const std::string& key) const {
  if (key.empty()) throw InvalidArgument("store (prefix '" + prefix_ + "'): empty key");
  return prefix_ + "/" + key;
}

std::vector<std::string> PrefixStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefixed(k));
  return out;
}

}  // namespace heft::comm
