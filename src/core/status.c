/* Status strings and names, the thread's error detail, and the runtime version. */
#include <stdarg.h>
#include <stdio.h>

#include "core/internal.h"
#include "core/status_list.h"

/* The list is in value order with no gap: row i is status i. */
enum {
#define ATTN_STATUS_ROW_(status, text) status##_row_,
  ATTN_STATUS_LIST(ATTN_STATUS_ROW_)
};
#define ATTN_STATUS_IN_ORDER_(status, text) _Static_assert((int)status##_row_ == (int)status, #status " out of order");
ATTN_STATUS_LIST(ATTN_STATUS_IN_ORDER_)

const char *attn_status_string(attn_status status) {
  switch (status) { /* -Wswitch: a status missing from the list is a warning */
#define ATTN_STATUS_STRING_(status, text) \
  case status:                            \
    return text;
    ATTN_STATUS_LIST(ATTN_STATUS_STRING_)
  }
  return "unknown status";
}

const char *attn_status_name(attn_status status) {
  switch (status) {
#define ATTN_STATUS_NAME_(status, text) \
  case status:                          \
    return #status;
    ATTN_STATUS_LIST(ATTN_STATUS_NAME_)
  }
  return "ATTN_UNKNOWN_STATUS";
}

/* The detail of the last failed call on this thread: written only by the failing branches
 * below, never cleared, so a successful call does not touch it. */
static _Thread_local char detail[256];

const char *attn_last_error(void) { return detail; }

attn_status attn_fail(attn_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return st;
}

attn_status attn_fail_more(attn_status st, const char *fmt, ...) {
  const size_t n = strlen(detail);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail + n, sizeof detail - n, fmt, ap);
  va_end(ap);
  return st;
}

size_t attn_name_at(const char *names, size_t i, const char **name) {
  const char *s = names;
  for (;;) {
    const size_t len = strcspn(s, " ");
    if (i-- == 0 || !s[len]) {
      *name = s;
      return len;
    }
    s += len + 1;
  }
}

attn_status attn_fail_null(const char *names, const void *const *p) {
  const char *name;
  size_t i = 0;
  while (p[i]) i++; /* the caller found a NULL among them */
  const size_t len = attn_name_at(names, i, &name);
  return attn_fail(ATTN_E_NULL_POINTER, "%.*s is NULL", (int)len, name);
}

attn_status attn_fail_ws(const char *what, size_t have, size_t need) {
  return attn_fail(ATTN_E_WORKSPACE_TOO_SMALL, "%s %zu B < %zu B needed", what, have, need);
}

size_t attn_first_nonfinite(const float *x, size_t n) {
  size_t i = 0;
  while (i < n && isfinite(x[i])) i++;
  return i;
}

unsigned attn_version_number(void) { return ATTN_VERSION_NUMBER; }
const char *attn_version_string(void) { return ATTN_VERSION_STRING; }
