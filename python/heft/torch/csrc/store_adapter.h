// The two store adapters of heft's torch.distributed backend, both ways between torch's c10d
// store and heft's (src/heft/comm/store/store.h):
// - FromC10dStore: heft's Store over the c10d store torch hands a backend (a PrefixStore of
//   the group), where ProcessGroupHeft's communicator meets its peers;
// - job_store(): a c10d store over heft's authenticated job store (HEFT_STORE, HEFT_TOKEN),
//   what heft.torch.distributed.init_process_group() hands torch under `heft run`.
// Each call blocks as its store does; errors of the store underneath pass through.
//
// Deliberately left out: counting keys (c10d's getNumKeys throws on a heft store).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

#include "heft/comm/store/store.h"

namespace heft::torch_backend {

class FromC10dStore : public comm::Store {
 public:
  // Takes the c10d store's timeout as the default deadline.
  explicit FromC10dStore(c10::intrusive_ptr<c10d::Store> s);
  void set(const std::string& key, const comm::Bytes& value) override;
  comm::Bytes get(const std::string& key, comm::Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, comm::Millis timeout) override;

 private:
  c10::intrusive_ptr<c10d::Store> s_;
};

// Connects to the job's store (HEFT_STORE, HEFT_TOKEN), every blocking call with deadline
// `timeout_s`, keys under "torch/<HEFT_JOB>". Throws heft::InvalidArgument when either
// variable is unset (the script was not started by `heft run` or `heft train`), and the
// store's errors when it cannot connect.
c10::intrusive_ptr<c10d::Store> job_store(double timeout_s);

}  // namespace heft::torch_backend
