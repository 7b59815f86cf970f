/*
 * libFuzzer target: attn_version_number, attn_version_string, attn_status_string, attn_isa_name,
 * attn_isa_from_name, attn_isa_available, attn_isa_set and attn_isa_get; attn_shape_init and the
 * attn_mask helpers.
 *
 * The bytes are an integer (status / ISA id) followed by a string; the string's bytes also give
 * seven sizes and a mask (size_t words, zero-padded; small or huge). Checks: the version matches
 * the header's macros; every status and ISA id, valid or not, gets a non-NULL string ("unknown
 * status" / "unknown" exactly for the ids the header does not list); a name maps to a path only
 * when it is exactly a name attn_isa_name writes, and back to that name; attn_isa_available and
 * attn_isa_set agree (a path that is available can be set and is then the active one, any other
 * id is refused with the documented status and leaves the active path alone); attn_isa_get never
 * answers ATTN_ISA_AUTO; attn_shape_init copies any sizes, writes the token-major layouts (o with
 * max(h_q, h_k, h_v) heads) where their products fit, and refuses NULL; the mask helpers give the
 * documented fields, and attn_mask_is_causal is 1 exactly for {ATTN_UNBOUNDED, 0, 0}.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

/* Word i of the bytes (zero-padded): every other word small (one byte), the rest as they are. */
static size_t word(const uint8_t *p, size_t n, size_t i) {
  size_t w = 0;
  if (i % 2 == 0) return i / 2 < n ? p[i / 2] : 0;
  for (size_t b = 0; b < sizeof w; ++b) {
    const size_t at = i * sizeof w + b;
    w |= (size_t)(at < n ? p[at] : 0) << (8 * b);
  }
  return w;
}

static void check_shape_and_masks(const uint8_t *p, size_t n) {
  size_t z[10];
  for (size_t i = 0; i < 10; ++i) z[i] = word(p, n, i);
  fz_check_status("shape_init(NULL)", attn_shape_init(NULL, z[0], z[1], z[2], z[3], z[4], z[5], z[6]),
                  ATTN_E_NULL_POINTER);
  attn_shape s;
  fz_check_status("shape_init", attn_shape_init(&s, z[0], z[1], z[2], z[3], z[4], z[5], z[6]), ATTN_OK);
  const size_t H = fz_heads_out(z[2], z[3], z[4]);
  const size_t heads[4] = {z[2], z[3], z[4], H}, width[4] = {z[5], z[5], z[6], z[6]};
  const attn_layout got[4] = {s.q, s.k, s.v, s.o};
  FZ_CHECK(
      s.n_q == z[0] && s.n_kv == z[1] && s.h_q == z[2] && s.h_k == z[3] && s.h_v == z[4] && s.d == z[5] && s.dv == z[6],
      "shape_init: sizes not copied");
  for (int i = 0; i < 4; ++i) {
    if (width[i] && heads[i] > SIZE_MAX / width[i]) continue; /* a product that wraps: not documented */
    FZ_CHECK(got[i].row_stride == heads[i] * width[i] && got[i].head_stride == width[i],
             "shape_init: layout %d is {%zu, %zu}", i, got[i].row_stride, got[i].head_stride);
  }

  const attn_mask m = attn_mask_window(z[7], z[8]), f = attn_mask_full(), c = attn_mask_causal();
  FZ_CHECK(m.left == z[7] && m.right == z[8] && m.chunk == 0, "mask_window");
  FZ_CHECK(f.left == ATTN_UNBOUNDED && f.right == ATTN_UNBOUNDED && f.chunk == 0, "mask_full");
  FZ_CHECK(c.left == ATTN_UNBOUNDED && c.right == 0 && c.chunk == 0, "mask_causal");
  FZ_CHECK(attn_mask_is_causal(c) && !attn_mask_is_causal(f), "mask_is_causal(causal / full)");
  const attn_mask any = {z[7], z[8], z[9]};
  FZ_CHECK(attn_mask_is_causal(any) == (z[7] == ATTN_UNBOUNDED && z[8] == 0 && z[9] == 0), "mask_is_causal");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int id = 0;
  if (size >= sizeof id)
    memcpy(&id, data, sizeof id);
  else if (size > 0)
    id = (int)(int8_t)data[0];
  const size_t skip = size >= sizeof id ? sizeof id : size;
  char *name = fz_calloc(size - skip + 1, 1); /* the rest, NUL-terminated (it may hold NULs) */
  memcpy(name, data + skip, size - skip);
  check_shape_and_masks(data + skip, size - skip);

  FZ_CHECK(attn_version_number() == ATTN_VERSION_NUMBER, "version number");
  FZ_CHECK(strcmp(attn_version_string(), ATTN_VERSION_STRING) == 0, "version string");

  const char *status = attn_status_string((attn_status)id);
  FZ_CHECK(status != NULL, "status_string(%d) is NULL", id);
  const int listed_status = id >= ATTN_OK && id <= ATTN_E_BAD_DTYPE; /* the last status (0.6.0) */
  FZ_CHECK(listed_status == (strcmp(status, "unknown status") != 0), "status_string(%d) = \"%s\"", id, status);

  const char *isa_name = attn_isa_name((attn_isa)id);
  FZ_CHECK(isa_name != NULL, "isa_name(%d) is NULL", id);
  const int listed_isa = id >= ATTN_ISA_NONE && id < ATTN_ISA_COUNT;
  FZ_CHECK(listed_isa == (strcmp(isa_name, "unknown") != 0), "isa_name(%d) = \"%s\"", id, isa_name);
  if (listed_isa && id != ATTN_ISA_NONE)
    FZ_CHECK(attn_isa_from_name(isa_name) == (attn_isa)id, "from_name(name(%d))", id);

  const attn_isa parsed = attn_isa_from_name(name);
  int is_name = 0;
  for (int i = ATTN_ISA_AUTO; i < ATTN_ISA_COUNT; ++i) is_name |= strcmp(name, attn_isa_name((attn_isa)i)) == 0;
  FZ_CHECK(is_name == (parsed != ATTN_ISA_NONE), "from_name(\"%s\") = %d", name, (int)parsed);
  if (parsed != ATTN_ISA_NONE) FZ_CHECK(strcmp(attn_isa_name(parsed), name) == 0, "name(from_name(\"%s\"))", name);
  FZ_CHECK(attn_isa_from_name(NULL) == ATTN_ISA_NONE, "from_name(NULL)");

  int native = -1;
  const int avail = attn_isa_available((attn_isa)id, &native);
  FZ_CHECK(avail == 0 || avail == 1, "isa_available(%d) = %d", id, avail);
  FZ_CHECK(native == 0 || native == 1, "isa_available(%d): is_native %d", id, native);
  FZ_CHECK(avail || !native, "isa_available(%d): native but not available", id);
  FZ_CHECK(attn_isa_available((attn_isa)id, NULL) == avail, "isa_available(%d, NULL)", id);
  const int is_path = id > ATTN_ISA_AUTO && id < ATTN_ISA_COUNT;
  FZ_CHECK(is_path || id == ATTN_ISA_AUTO || !avail, "isa_available(%d): not a path", id);

  const attn_isa before = attn_isa_get();
  FZ_CHECK(before != ATTN_ISA_AUTO, "isa_get() = auto");
  const attn_status st = attn_isa_set((attn_isa)id);
  const attn_isa after = attn_isa_get();
  if (!is_path && id != ATTN_ISA_AUTO) {
    fz_check_status("isa_set(not a path)", st, ATTN_E_BAD_ARGUMENT);
    FZ_CHECK(after == before, "isa_set(%d) refused, yet the active path changed", id);
  } else if (!avail) {
    fz_check_status("isa_set(unavailable)", st, ATTN_E_UNSUPPORTED_ISA);
    FZ_CHECK(after == before, "isa_set(%d) refused, yet the active path changed", id);
  } else {
    fz_check_status("isa_set(available)", st, ATTN_OK);
    int nat = 0;
    FZ_CHECK(id == ATTN_ISA_AUTO ? attn_isa_available(after, &nat) && nat : after == (attn_isa)id,
             "isa_set(%d): active path %d", id, (int)after);
  }
  free(name);
  return 0;
}
