// `heft console [--port P] [--host H] [--token T]`: serves the web console
// (profile/console_server.h) until interrupted. Read-only unless a token is given (or
// --allow-stop makes one and prints it).
#include <pthread.h>
#include <signal.h>

#include <iostream>
#include <random>
#include <thread>

#include "heft/cli/commands.h"
#include "heft/job/paths.h"
#include "heft/profile/console_server.h"
#include "heft/tune/tuning_record.h"

namespace heft::cli {

Command add_console_command(CLI::App& app) {
  struct Args {
    std::string host = "127.0.0.1";
    int port = 8686;
    std::string token;
    bool allow_stop = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("console", "Serve the web console: jobs, plots, logs, findings");
  cmd->add_option("--host", args->host, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", args->port, "Port (default 8686; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--token", args->token, "Allow stop buttons for requests that carry this token");
  cmd->add_flag("--allow-stop", args->allow_stop, "Make a random token, print it, allow stops");
  return [args]() -> int {
    profile::ConsoleOptions o;
    o.home = job::heft_home();
    o.host = args->host;
    o.port = args->port;
    o.token = args->token;
    if (o.token.empty() && args->allow_stop) {
      std::random_device rd;
      const char* hex = "0123456789abcdef";
      for (int i = 0; i < 32; ++i) o.token += hex[rd() % 16];
    }
    o.list_tunings = [home = o.home] { return tune::list_tunings(home); };
    o.read_tuning = [home = o.home](const std::string& n) { return tune::read_tuning(home, n); };
    o.stop_tuning = [home = o.home](const std::string& n) {
      return tune::request_tuning_stop(home, n).has_value();
    };
    // SIGINT and SIGTERM go to one thread that stops the server (blocked before any other
    // thread exists, so none of the server's threads takes them).
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    profile::ConsoleServer server(o);
    const int port = server.bind();
    std::cout << "heft console: serving http://" << o.host << ":" << port << "/ ("
              << (o.token.empty() ? "read-only" : "stop buttons need the token") << ")";
    if (args->allow_stop && args->token.empty()) std::cout << "; token " << o.token;
    std::cout << std::endl;
    std::thread([&server, stop_signals] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      server.stop();
    }).detach();
    server.serve();
    return 0;
  };
}

}  // namespace heft::cli
