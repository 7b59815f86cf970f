/* Status strings and the runtime version. */
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

unsigned attn_version_number(void) { return ATTN_VERSION_NUMBER; }
const char *attn_version_string(void) { return ATTN_VERSION_STRING; }
