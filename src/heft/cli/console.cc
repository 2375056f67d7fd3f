// `heft console [--port P] [--host H] [--token-file F] [--allow-host N]... [--no-auth]
// [--tls-cert C --tls-key K]`: serves the web console (profile/console_server.h) until
// interrupted. Every /api/ request needs a token: made at start (printed once in the URL,
// and kept in $HEFT_HOME/console/PORT.url, mode 0600, while the console runs), or read from
// --token-file or HEFT_CONSOLE_TOKEN. A token on the command line (--token) is refused:
// every local user sees a process's arguments.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "heft/cli/commands.h"
#include "heft/error.h"
#include "heft/job/paths.h"
#include "heft/profile/console_guard.h"
#include "heft/profile/console_server.h"
#include "heft/tune/tuning_record.h"

namespace heft::cli {

namespace {

struct ConsoleArgs {
  std::string host = "127.0.0.1";
  int port = 8686;
  std::string token;
  std::string token_file;
  std::vector<std::string> allow_hosts;
  bool no_auth = false;
  std::string tls_cert, tls_key;
};

void add_console_options(CLI::App* cmd, ConsoleArgs& args) {
  cmd->add_option("--host", args.host, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", args.port, "Port (default 8686; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--token", args.token,
                  "Refused: a token in the arguments is visible to every user (ps); use "
                  "--token-file or HEFT_CONSOLE_TOKEN");
  cmd->add_option("--token-file", args.token_file,
                  "Read the token from this file (mode 0600; default: HEFT_CONSOLE_TOKEN, or a "
                  "new random token printed in the URL)");
  cmd->add_option("--allow-host", args.allow_hosts,
                  "Also answer requests whose Host is this name (repeatable)");
  cmd->add_flag("--no-auth", args.no_auth,
                "Serve without a token, read-only; loopback addresses only");
  cmd->add_option("--tls-cert", args.tls_cert, "Serve HTTPS with this PEM certificate");
  cmd->add_option("--tls-key", args.tls_key, "... and this PEM key (unencrypted)");
}

// The token in `path`: its first line, which must be 16+ printable characters; the file
// must be readable by its owner only.
std::string read_token_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw InvalidArgument("heft console: --token-file " + path + ": no such file");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw InvalidArgument("heft console: --token-file " + path + " is readable by others (mode " +
                          mode + "): chmod 600 " + path);
  }
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  return token;
}

void check_token(const std::string& token, const std::string& from) {
  bool printable = true;
  for (char c : token) printable = printable && c > ' ' && c < 127;
  if (token.size() < 16 || token.size() > 256 || !printable)
    throw InvalidArgument("heft console: the token from " + from +
                          " must be 16 to 256 printable characters without spaces (got " +
                          std::to_string(token.size()) + " characters)");
}

// Where the console's token comes from: none under --no-auth, else --token-file, else
// HEFT_CONSOLE_TOKEN, else a new random one (`from` empty). Throws InvalidArgument for
// --token, for a token beside --no-auth and for a token that is not 16 to 256 printable
// characters.
struct ConsoleToken {
  std::string token;
  std::string from;  // "--token-file F" or "HEFT_CONSOLE_TOKEN"; "" when made here or none
};

ConsoleToken console_token(const ConsoleArgs& args) {
  if (!args.token.empty())
    throw InvalidArgument(
        "heft console: --token is refused: a command line is visible to every user on this "
        "machine (ps, /proc/PID/cmdline); put the token in a file only you can read and pass "
        "--token-file FILE, or set HEFT_CONSOLE_TOKEN");
  const char* env_token = std::getenv("HEFT_CONSOLE_TOKEN");
  const bool env_set = env_token && *env_token;
  ConsoleToken t;
  if (args.no_auth) {
    if (!args.token_file.empty() || env_set)
      throw InvalidArgument("heft console: --no-auth and a token (--token-file or "
                            "HEFT_CONSOLE_TOKEN) contradict each other");
    return t;
  }
  if (!args.token_file.empty()) {
    t = {read_token_file(args.token_file), "--token-file " + args.token_file};
  } else if (env_set) {
    t = {env_token, "HEFT_CONSOLE_TOKEN"};
  } else {
    return {profile::random_token(), ""};
  }
  check_token(t.token, t.from);
  return t;
}

// The server's options from the command line, the token and the tune layer's records.
profile::ConsoleOptions console_options(const ConsoleArgs& args, const std::string& token) {
  profile::ConsoleOptions o;
  o.home = job::heft_home();
  o.host = args.host;
  o.port = args.port;
  o.token = token;
  o.no_auth = args.no_auth;
  o.allow_hosts = args.allow_hosts;
  o.tls_cert = args.tls_cert;
  o.tls_key = args.tls_key;
  o.list_tunings = [home = o.home] { return tune::list_tunings(home); };
  o.read_tuning = [home = o.home](const std::string& n) { return tune::read_tuning(home, n); };
  o.stop_tuning = [home = o.home](const std::string& n) {
    return tune::request_tuning_stop(home, n).has_value();
  };
  return o;
}

// Writes `url` to $HEFT_HOME/console/PORT.url, created mode 0600; returns the path ("" when
// it could not be written: the URL was printed anyway).
std::string write_url_file(const std::string& home, int port, const std::string& url) {
  const std::string dir = home + "/console";
  ::mkdir(home.c_str(), 0700);
  ::mkdir(dir.c_str(), 0700);
  const std::string path = dir + "/" + std::to_string(port) + ".url";
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return "";
  const std::string text = url + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok ? path : "";
}

// Tells where the console serves (and warns on stderr of plain HTTP beyond loopback).
// Returns the URL file written for a new token ("" when none), to remove at the end.
std::string announce(const profile::ConsoleServer& server, const profile::ConsoleOptions& o,
                     int port, const std::string& token_from) {
  const std::string where = o.host + ":" + std::to_string(port);
  if (!profile::is_loopback_host(o.host) && o.tls_cert.empty())
    std::cerr << "heft console: warning: serving plain HTTP on " << where
              << ": the token, logs and metrics cross the network unencrypted, readable by "
                 "anyone on the way; give --tls-cert/--tls-key, or keep 127.0.0.1 and use an "
                 "SSH tunnel (ssh -L "
              << port << ":127.0.0.1:" << port << " HOST)\n";
  std::string url_file;
  if (o.no_auth) {
    std::cout << "heft console: serving " << server.url()
              << " WITHOUT A TOKEN (--no-auth), read-only: every user and program on this "
                 "machine can read every job's spec (environment names, not values), "
                 "metrics, logs and findings\n";
  } else if (token_from.empty()) {
    url_file = write_url_file(o.home, port, server.url());
    std::cout << "heft console: serving " << server.url() << "\n"
              << "  open this URL once: it logs the browser in; API clients send "
                 "Authorization: Bearer TOKEN"
              << (url_file.empty() ? "" : "; the URL is also in " + url_file + " (mode 0600)")
              << "\n";
  } else {
    std::string bare = server.url();
    bare = bare.substr(0, bare.find("?token="));
    std::cout << "heft console: serving " << bare << " (the token is the one from "
              << token_from << ": open " << bare << "?token=TOKEN once)\n";
  }
  std::cout << std::flush;
  return url_file;
}

int serve_console(const ConsoleArgs& args) {
  const ConsoleToken token = console_token(args);
  const profile::ConsoleOptions o = console_options(args, token.token);
  // SIGINT and SIGTERM go to one thread that stops the server (blocked before any other
  // thread exists, so none of the server's threads takes them).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  profile::ConsoleServer server(o);
  const int port = server.bind();
  const std::string url_file = announce(server, o, port, token.from);
  std::thread([&server, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.stop();
  }).detach();
  server.serve();
  if (!url_file.empty()) ::unlink(url_file.c_str());
  return 0;
}

}  // namespace

Command add_console_command(CLI::App& app) {
  auto args = std::make_shared<ConsoleArgs>();
  CLI::App* cmd = app.add_subcommand("console", "Serve the web console: jobs, plots, logs, findings");
  add_console_options(cmd, *args);
  return [args]() -> int { return serve_console(*args); };
}

}  // namespace heft::cli
