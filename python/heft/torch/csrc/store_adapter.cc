#include "store_adapter.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>

#include "heft/comm/store/tcp_store.h"
#include "heft/contract/worker.h"
#include "heft/error.h"

namespace heft::torch_backend {

FromC10dStore::FromC10dStore(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {
  set_timeout(std::chrono::duration_cast<comm::Millis>(s_->getTimeout()));
}

void FromC10dStore::set(const std::string& key, const comm::Bytes& value) { s_->set(key, value); }

comm::Bytes FromC10dStore::get(const std::string& key, comm::Millis timeout) {
  s_->wait({key}, timeout);
  return s_->get(key);
}

int64_t FromC10dStore::add(const std::string& key, int64_t delta) { return s_->add(key, delta); }

bool FromC10dStore::check(const std::vector<std::string>& keys) { return s_->check(keys); }

bool FromC10dStore::delete_key(const std::string& key) { return s_->deleteKey(key); }

void FromC10dStore::wait(const std::vector<std::string>& keys, comm::Millis timeout) {
  s_->wait(keys, timeout);
}

namespace {

// A c10d store over heft's authenticated TcpStore.
class ToC10dStore : public c10d::Store {
 public:
  ToC10dStore(std::shared_ptr<comm::Store> s, std::chrono::milliseconds timeout)
      : c10d::Store(timeout), s_(std::move(s)) {}
  // torch 2 hands clones to its other threads: they share the connection (heft's stores
  // take calls from any thread).
  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<ToC10dStore>(s_, timeout_);
  }
  void set(const std::string& key, const std::vector<uint8_t>& value) override { s_->set(key, value); }
  std::vector<uint8_t> get(const std::string& key) override { return s_->get(key, timeout_); }
  int64_t add(const std::string& key, int64_t value) override { return s_->add(key, value); }
  bool deleteKey(const std::string& key) override { return s_->delete_key(key); }
  bool check(const std::vector<std::string>& keys) override { return s_->check(keys); }
  int64_t getNumKeys() override {
    TORCH_CHECK(false, "heft's store does not count its keys (getNumKeys)");
  }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    s_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<comm::Store> s_;
};

}  // namespace

c10::intrusive_ptr<c10d::Store> job_store(double timeout_s) {
  const contract::HeftVariables job = contract::HeftVariables::from_process();
  if (!job.store || !job.token)
    throw InvalidArgument(
        "heft.torch.distributed.init_process_group(): HEFT_STORE and HEFT_TOKEN are not "
        "set (start the script with `heft run` or `heft train`, or use "
        "torch.distributed.init_process_group(backend=\"heft\", init_method=...))");
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  std::shared_ptr<comm::Store> store = comm::TcpStore::connect(*job.store, *job.token, timeout);
  store->set_timeout(timeout);
  // The job's name as HEFT_JOB gives it, "" outside a job (the prefix torch groups use).
  return c10::make_intrusive<c10d::PrefixStore>(std::string("torch/") + job.job.value_or(""),
                                                c10::make_intrusive<ToC10dStore>(store, timeout));
}

}  // namespace heft::torch_backend
