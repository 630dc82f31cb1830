// vowels_c is an Extism plug-in written with Extism's C PDK
// (extism-pdk.h, vendored beside it from github.com/extism/c-pdk at
// 54dbb40, BSD-3-Clause: LICENSE.extism-pdk), for the differential test
// (agrun and Extism's Go SDK must give the same outputs) and wasmtools'
// plug-in tests. Built by scripts/build-examples.sh as a reactor.
//
// Exports:
//   - count_vowels: the vowels (config "vowels", default "aeiou") in the
//     input, as {"count":N,"vowels":"...","calls":N}; "calls" counts the
//     calls in a var, so it shows whether vars outlive a call.
//   - fail: sets the error "no luck: <input>" and returns 1.
#define EXTISM_ENABLE_LOW_LEVEL_API
#define EXTISM_USE_LIBC
#define EXTISM_IMPLEMENTATION
// The header as published compares a signed and an unsigned log level.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wsign-compare"
#include "extism-pdk.h"
#pragma clang diagnostic pop

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t EXTISM_EXPORTED_FUNCTION(count_vowels) {
  const char *vowels = "aeiou";
  char *configured = NULL;
  ExtismHandle h = extism_config_get_buf_from_sz("vowels");
  if (h != 0) {
    configured = extism_load_sz_dup(h, NULL);
    extism_free(h);
    if (configured == NULL) {
      extism_error_set_buf_from_sz("out of memory");
      return 1;
    }
    vowels = configured;
  }

  uint64_t count = 0;
  uint64_t length = extism_input_length();
  for (uint64_t i = 0; i < length; i++) {
    uint8_t ch = extism_input_load_u8(i);
    if (ch >= 'A' && ch <= 'Z') {
      ch = (uint8_t)(ch - 'A' + 'a');
    }
    if (ch != 0 && strchr(vowels, ch) != NULL) {
      count++;
    }
  }

  uint64_t calls = 0;
  ExtismHandle v = extism_var_get_buf_from_sz("calls");
  if (v != 0 && extism_length(v) == sizeof(calls)) {
    extism_load_from_handle(v, 0, &calls, sizeof(calls));
  }
  calls++;
  ExtismHandle nv = extism_alloc_buf(&calls, sizeof(calls));
  extism_var_set_buf_from_sz("calls", nv);

  char out[512];
  int n = snprintf(out, sizeof(out), "{\"count\":%llu,\"vowels\":\"%s\",\"calls\":%llu}",
                   (unsigned long long)count, vowels, (unsigned long long)calls);
  free(configured);
  if (n < 0 || (size_t)n >= sizeof(out)) {
    extism_error_set_buf_from_sz("the vowels are too long");
    return 1;
  }
  extism_output_buf(out, (size_t)n);
  return 0;
}

int32_t EXTISM_EXPORTED_FUNCTION(fail) {
  size_t n = 0;
  char *in = extism_load_input_sz_dup(&n);
  if (in == NULL) {
    extism_error_set_buf_from_sz("out of memory");
    return 1;
  }
  char msg[256];
  snprintf(msg, sizeof(msg), "no luck: %s", in);
  free(in);
  extism_error_set_buf_from_sz(msg);
  return 1;
}
