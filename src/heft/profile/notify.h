// A rule's notify action (job/spec/rule_spec.h NotifyAction): a new finding, as JSON, goes to
// a command's stdin and/or in an HTTP POST (Content-Type application/json), each bounded by
// the action's timeout_s. A notification that fails (the command missing, exiting non-zero or
// outliving its timeout; the server unreachable or answering other than 2xx) is logged on
// stderr and counted, and never stops or fails the job.
//
// The command runs without a shell, in its own process group (killed whole at the timeout),
// with heft train's environment; its stdout and stderr go to heft train's stderr. Plain http
// only: the console's HTTP library is built without TLS (POST to a local relay for https).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "heft/job/spec/rule_spec.h"
#include "heft/result.h"

namespace heft::profile {

// One notification, synchronously: ok, or why it failed ("'notify.sh' exited with status 3",
// "POST http://127.0.0.1:9/x: connection refused", "... did not finish within 2 s").
Status notify_exec(const std::vector<std::string>& argv, const std::string& body, double timeout_s);
Status notify_url(const std::string& url, const std::string& body, double timeout_s);

// Sends notifications on threads of their own, so a slow receiver never delays the rules or
// the job; the destructor waits for those in flight (each bounded by its timeout).
class Notifier {
 public:
  explicit Notifier(std::string log_name) : log_name_(std::move(log_name)) {}
  ~Notifier();
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // Starts the action's exec and url notifications of `finding`.
  void send(const job::NotifyAction& action, const nlohmann::json& finding);
  // Waits for every notification started so far.
  void wait();
  int64_t delivered() const { return delivered_.load(); }
  int64_t failed() const { return failed_.load(); }

 private:
  std::string log_name_;
  std::mutex mu_;
  std::vector<std::thread> threads_;  // guarded by mu_
  std::atomic<int64_t> delivered_{0}, failed_{0};
};

}  // namespace heft::profile
