// Refused connections (a wrong job token, a garbled or stalled handshake), reported on stderr
// at most once a second per process, the rest counted: any local user may connect to a
// rank's listener or to the store, and must not be able to flood a job's output with it.
// Thread-safe. Deliberately left out: a per-peer limit (one peer flooding hides another's
// refusals, but the count in the next line shows them).
#pragma once

#include <cstdint>
#include <string>

namespace heft::comm {

// Counts one refusal and, unless a line went out in the last second, writes
// "<where>: refused a connection from <peer>: <why>" to stderr, followed by
// " (N more refused since the last report)" when some were not shown.
void log_refused(const std::string& where, const std::string& peer, const std::string& why);

// Connections this process refused since it started.
uint64_t refused_connections();

}  // namespace heft::comm
