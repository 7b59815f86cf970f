/* Every attn_status (include/attn.h) with its description, in value order (0, 1, ...: status.c
 * checks it): status.c's strings and the tests' status count follow from it. X(status, text) */
#ifndef ATTN_CORE_STATUS_LIST_H
#define ATTN_CORE_STATUS_LIST_H

#define ATTN_STATUS_LIST(X)                                                                                            \
  X(ATTN_OK, "success")                                                                                                \
  X(ATTN_E_NULL_POINTER, "a required pointer is NULL")                                                                 \
  X(ATTN_E_ZERO_SIZE, "a size is zero")                                                                                \
  X(ATTN_E_SIZE_OVERFLOW, "a size product or offset overflows")                                                        \
  X(ATTN_E_BAD_STRIDE, "a stride is smaller than a row, or an output layout overlaps itself")                          \
  X(ATTN_E_BAD_HEADS, "a head count does not divide the output heads (or keys and values differ where they must not)") \
  X(ATTN_E_BAD_WINDOW, "the mask cannot be honoured by this variant")                                                  \
  X(ATTN_E_BAD_SCALE, "scale is not finite, or not one the feature map takes")                                         \
  X(ATTN_E_BAD_EPS, "eps is negative or not finite, or not 0 where the map has none")                                  \
  X(ATTN_E_BAD_FEATURE_MAP, "unknown feature map or unusable feature size")                                            \
  X(ATTN_E_UNSUPPORTED_ISA, "the selected ISA path cannot run on this CPU")                                            \
  X(ATTN_E_WORKSPACE_TOO_SMALL, "workspace or memory is too small")                                                    \
  X(ATTN_E_ALIASING, "an output overlaps an input or another output")                                                  \
  X(ATTN_E_STATE_MISMATCH, "the state's shape or mode differs from the call's")                                        \
  X(ATTN_E_BAD_ARGUMENT, "invalid argument value")                                                                     \
  X(ATTN_E_BAD_NORMALIZATION, "the feature map cannot run with this normalisation")                                    \
  X(ATTN_E_BAD_FEATURE_MATRIX, "the FAVOR+ matrix is missing or not finite, or its source is unknown")                 \
  X(ATTN_E_BAD_GATE,                                                                                                   \
    "a log gate is positive or not finite, a beta is not positive and finite, or the gate kind is unknown")            \
  X(ATTN_E_BAD_BIAS, "the bias kind is unknown, the bias is not finite, or the bias table is missing or empty")        \
  X(ATTN_E_TOO_LARGE, "the problem is above the explicit analysis size limit")                                         \
  X(ATTN_E_SYSTEM, "the system refused memory or a thread")                                                            \
  X(ATTN_E_BAD_DTYPE, "the K/V element type is unknown, or not one this variant takes")

#endif
