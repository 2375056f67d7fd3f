// Values a rank publishes in a rendezvous store for its peers to act on (a link's address, a
// shared-memory segment's name), signed with the job token, so that a reader trusts them
// whatever store carries them: heft's own authenticated store, or the store torch hands the
// backend (env://'s TCPStore, which authenticates nobody and any local user may write).
//
// Format: value || HMAC-SHA256(token, "store-value/" || key || 0x00 || value) (32 bytes). The
// key is in the proof, so a signed value copied to another key is refused; a value copied
// from an earlier group of the same job under the same key is not (keys carry the group's
// unique name, and what it names is authenticated again by the link handshake).
// Deliberately left out: integers of add() (counters cannot be signed; a forged count
// delays or fails set-up, it cannot redirect a link).
#pragma once

#include <string>

#include "heft/comm/store/store.h"

namespace heft::comm {

// Sets `key` to `value` signed with `token`. Throws as Store::set does.
void set_signed(Store& store, const std::string& token, const std::string& key,
                const std::string& value);

// Waits for `key` (as Store::get) and returns its value once its signature checks. Throws
// heft::IoError naming the key when it is unsigned or signed with another token (someone
// without the job's token wrote it), and as Store::get does otherwise.
std::string get_signed(Store& store, const std::string& token, const std::string& key,
                       Millis timeout);

}  // namespace heft::comm
