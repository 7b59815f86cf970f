/* Status strings and the runtime version. */
#include "core/internal.h"

const char *attn_status_string(attn_status status) {
  switch (status) {
    case ATTN_OK: return "success";
    case ATTN_E_NULL_POINTER: return "a required pointer is NULL";
    case ATTN_E_ZERO_SIZE: return "a size is zero";
    case ATTN_E_SIZE_OVERFLOW: return "a size product or offset overflows";
    case ATTN_E_BAD_STRIDE: return "a stride is smaller than a row, or an output layout overlaps itself";
    case ATTN_E_BAD_HEADS: return "query heads are not a multiple of key/value heads";
    case ATTN_E_BAD_WINDOW: return "the window cannot be honoured";
    case ATTN_E_BAD_SCALE: return "scale is not finite";
    case ATTN_E_BAD_EPS: return "eps is negative or not finite";
    case ATTN_E_BAD_FEATURE_MAP: return "unknown feature map or unusable feature size";
    case ATTN_E_UNSUPPORTED_ISA: return "the selected ISA path cannot run on this CPU";
    case ATTN_E_WORKSPACE_TOO_SMALL: return "workspace or memory is too small";
    case ATTN_E_ALIASING: return "an output overlaps an input or another output";
    case ATTN_E_STATE_MISMATCH: return "the state's shape or mode differs from the call's";
    case ATTN_E_BAD_ARGUMENT: return "invalid argument value";
  }
  return "unknown status";
}

unsigned attn_version_number(void) { return ATTN_VERSION_NUMBER; }
const char *attn_version_string(void) { return ATTN_VERSION_STRING; }
