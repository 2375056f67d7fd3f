// PrefixStore: a namespace over another store. Every key k becomes prefix + "/" + k in the
// base store, so each job, restart and process group keeps its keys apart while sharing one
// server. PrefixStores nest: PrefixStore("g1", PrefixStore("job", base)) writes "job/g1/k".
// Deliberately left out: listing or deleting a whole prefix.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "heft/comm/store/store.h"

namespace heft::comm {

class PrefixStore : public Store {
 public:
  // Shares ownership of base (non-null, else heft::InvalidArgument). The default timeout
  // starts as base->timeout() and may then be changed independently of base's.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  // Store's contract on the prefixed keys; thread-safe as base is. Errors come from base
  // and name the prefixed keys. Blocking calls without a timeout use this store's timeout().
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  using Store::get;
  using Store::set;
  using Store::wait;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  // prefix_ + "/" + key; an empty key is heft::InvalidArgument here, since the prefixed
  // key would not be empty and base could not tell.
  std::string prefixed(const std::string& key) const;
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;

  const std::string prefix_;
  const std::shared_ptr<Store> base_;
};

}  // namespace heft::comm
