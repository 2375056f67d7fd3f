#include "heft/comm/store/signed_value.h"

#include <algorithm>

#include "heft/comm/auth.h"
#include "heft/error.h"

namespace heft::comm {

namespace {

Mac value_mac(const std::string& token, const std::string& key, const std::string& value) {
  return auth_mac(token, "store-value/" + key + std::string(1, '\0') + value, Nonce{});
}

}  // namespace

void set_signed(Store& store, const std::string& token, const std::string& key,
                const std::string& value) {
  const Mac mac = value_mac(token, key, value);
  Bytes b(value.begin(), value.end());
  b.insert(b.end(), mac.begin(), mac.end());
  store.set(key, b);
}

std::string get_signed(Store& store, const std::string& token, const std::string& key,
                       Millis timeout) {
  const Bytes b = store.get(key, timeout);
  Mac mac{};
  if (b.size() >= mac.size()) {
    std::copy(b.end() - static_cast<std::ptrdiff_t>(mac.size()), b.end(), mac.begin());
    std::string value(b.begin(), b.end() - static_cast<std::ptrdiff_t>(mac.size()));
    if (mac_equal(mac, value_mac(token, key, value))) return value;
  }
  throw IoError("store key '" + key +
                "': its value is not signed with the job token (written by someone without "
                "the token: refused; see docs/security.md)");
}

}  // namespace heft::comm
