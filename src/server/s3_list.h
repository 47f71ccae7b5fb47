// ListObjectsV2 (prefix, delimiter, continuation; bounded by [s3] max_list_keys), answered from
// the S3 endpoint's name registry (s3_service.h) and the Store: a name whose object was evicted,
// expired or deleted is forgotten as the listing meets it.

#ifndef KVTIER_SERVER_S3_LIST_H_
#define KVTIER_SERVER_S3_LIST_H_

#include <string>

#include "kvtier/store.h"
#include "src/server/handler.h"
#include "src/server/s3_auth.h"
#include "src/server/s3_protocol.h"

namespace kvtier::server {

// The page of `bucket`'s listing that the query of the request `auth` describes asks for.
S3Reply ListObjectsV2(const ServerContext* ctx, const S3Auth& auth, TenantId tenant,
                      const std::string& bucket);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_S3_LIST_H_
