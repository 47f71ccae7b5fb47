// OpenSSL's thread-local error queue as text.

#ifndef KVTIER_SRC_COMMON_OPENSSL_ERRORS_H_
#define KVTIER_SRC_COMMON_OPENSSL_ERRORS_H_

#include <string>

namespace kvtier {

// Empties this thread's OpenSSL error queue and returns its entries joined by "; ", oldest
// first; "" when it was empty.
std::string DrainOpenSslErrors();

}  // namespace kvtier

#endif  // KVTIER_SRC_COMMON_OPENSSL_ERRORS_H_
