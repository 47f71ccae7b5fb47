/* The C API of an installed kvtier, compiled with what pkg-config says (kvtier-client): puts a
   value into the kvtierd at argv[1] and reads it back. */
#include <stdio.h>
#include <string.h>

#include "kvtier/c.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char* err = NULL;
  kvtier_client_options_t* options = kvtier_client_options_create();
  kvtier_client_options_set_endpoint(options, argv[1]);
  kvtier_client_t* client = kvtier_client_connect(options, &err);
  kvtier_client_options_destroy(options);
  if (err != NULL) {
    fprintf(stderr, "open: %s\n", err);
    return 1;
  }
  unsigned char key[32] = {0};
  memcpy(key, "install-test-c", 14);
  const char value[] = "from C, through pkg-config";
  kvtier_client_put(client, key, value, sizeof value, NULL, &err);
  size_t len = 0;
  char* back = err == NULL ? kvtier_client_get(client, key, &len, &err) : NULL;
  const int same = back != NULL && len == sizeof value && memcmp(back, value, len) == 0;
  if (err != NULL || !same) {
    fprintf(stderr, "put/get: %s\n", err != NULL ? err : "other bytes");
    return 1;
  }
  kvtier_free(back);
  kvtier_client_close(client);
  printf("C client %s: put and get OK\n", kvtier_version());
  return 0;
}
