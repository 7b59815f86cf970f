/* Documents of tables and their writers: readable text, Markdown, CSV (one file per table) and
 * JSON (one file per document). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "analyze.h"

void an_doc_init(an_doc *doc, const char *name, const char *title) {
  memset(doc, 0, sizeof *doc);
  snprintf(doc->name, sizeof doc->name, "%s", name);
  snprintf(doc->title, sizeof doc->title, "%s", title);
}

void an_doc_free(an_doc *doc) {
  for (int i = 0; i < doc->ntables; i++) free(doc->tables[i].cells);
  doc->ntables = 0;
}

an_table *an_table_new(an_doc *doc, const char *name, const char *title, const char *cols) {
  if (doc->ntables == AN_MAX_TABLES) return NULL;
  an_table *t = &doc->tables[doc->ntables++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->title, sizeof t->title, "%s", title);
  for (const char *p = cols; *p && t->ncols < AN_MAX_COLS; t->ncols++) {
    size_t len = strcspn(p, ",");
    snprintf(t->cols[t->ncols], sizeof t->cols[0], "%.*s", (int)len, p);
    p += len + (p[len] == ',');
  }
  return t;
}

static an_cell *new_cell(an_table *t) {
  if (t->ncells == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    an_cell *c = realloc(t->cells, cap * sizeof *c);
    if (!c) return NULL;
    t->cells = c, t->cap = cap;
  }
  return &t->cells[t->ncells++];
}

void an_put(an_table *t, double v, const char *fmt) {
  an_cell *c = t ? new_cell(t) : NULL;
  if (!c) return;
  c->v = v, c->is_num = isfinite(v);
  if (isfinite(v))
    snprintf(c->s, sizeof c->s, fmt, v);
  else
    snprintf(c->s, sizeof c->s, "%s", isnan(v) ? "-" : v > 0 ? "inf" : "-inf");
}

void an_puts(an_table *t, const char *s) {
  an_cell *c = t ? new_cell(t) : NULL;
  if (!c) return;
  c->v = NAN, c->is_num = 0;
  snprintf(c->s, sizeof c->s, "%s", s);
}

size_t an_rows(const an_table *t) { return t->ncols ? t->ncells / (size_t)t->ncols : 0; }

static void vnote(an_doc *doc, const char *fmt, va_list ap) {
  if (doc->nnotes < AN_MAX_NOTES) vsnprintf(doc->notes[doc->nnotes++], sizeof doc->notes[0], fmt, ap);
}

void an_note(an_doc *doc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vnote(doc, fmt, ap);
  va_end(ap);
}

int an_check(an_doc *doc, int ok, const char *fmt, ...) {
  doc->checks++;
  if (ok) return 1;
  doc->failures++;
  char msg[360];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  an_note(doc, "FAILED: %s", msg);
  fprintf(stderr, "attn-analyze %s: FAILED: %s\n", doc->name, msg);
  return 0;
}

/* Display width of UTF-8 text (code points; the tables use only narrow ones). */
static int width(const char *s) {
  int w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
  return w;
}

static void pad(FILE *f, const char *s, int w) { fprintf(f, "%*s%s", w - width(s), "", s); }

void an_doc_print(const an_doc *doc) {
  printf("\n== %s\n", doc->title);
  for (int i = 0; i < doc->ntables; i++) {
    const an_table *t = &doc->tables[i];
    if (t->hide) continue;
    int w[AN_MAX_COLS] = {0};
    for (int c = 0; c < t->ncols; c++) {
      w[c] = width(t->cols[c]);
      for (size_t r = 0; r < an_rows(t); r++) {
        int cw = width(t->cells[r * t->ncols + c].s);
        if (cw > w[c]) w[c] = cw;
      }
    }
    printf("\n%s\n", t->title);
    for (int c = 0; c < t->ncols; c++) pad(stdout, t->cols[c], w[c] + (c ? 2 : 0));
    printf("\n");
    for (size_t r = 0; r < an_rows(t); r++) {
      for (int c = 0; c < t->ncols; c++) pad(stdout, t->cells[r * t->ncols + c].s, w[c] + (c ? 2 : 0));
      printf("\n");
    }
    if (t->note[0]) printf("%s\n", t->note);
  }
  for (int i = 0; i < doc->nnotes; i++) printf("* %s\n", doc->notes[i]);
  printf("%s: %d checks, %d failed\n", doc->name, doc->checks, doc->failures);
}

static int mkdir_p(const char *dir) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(buf, 0777);
      *p = '/';
    }
  return mkdir(buf, 0777) == 0 || errno == EEXIST ? 0 : -1;
}

static FILE *open_out(const char *dir, const char *stem, const char *ext) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s.%s", dir, stem, ext);
  FILE *f = fopen(path, "w");
  if (!f) fprintf(stderr, "attn-analyze: cannot write %s: %s\n", path, strerror(errno));
  return f;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

static void csv_cell(FILE *f, const an_cell *c) {
  if (c->is_num) {
    fprintf(f, "%.9g", c->v);
  } else if (strcmp(c->s, "-") == 0) { /* missing: empty */
  } else if (strpbrk(c->s, ",\"")) {
    fputc('"', f);
    for (const char *p = c->s; *p; p++) {
      if (*p == '"') fputc('"', f);
      fputc(*p, f);
    }
    fputc('"', f);
  } else {
    fputs(c->s, f);
  }
}

/* A Markdown table cell: | escaped. */
static void md_cell(FILE *f, const char *s) {
  fputc(' ', f);
  for (; *s; s++) fprintf(f, "%s%c", *s == '|' ? "\\" : "", *s);
  fputs(" |", f);
}

static int write_md(const an_doc *doc, const char *dir) {
  FILE *f = open_out(dir, doc->name, "md");
  if (!f) return -1;
  fprintf(f, "## %s\n\n", doc->title);
  for (int i = 0; i < doc->ntables; i++) {
    const an_table *t = &doc->tables[i];
    fprintf(f, "### %s\n\n|", t->title);
    for (int c = 0; c < t->ncols; c++) md_cell(f, t->cols[c]);
    fprintf(f, "\n|");
    for (int c = 0; c < t->ncols; c++) fprintf(f, "---|");
    for (size_t r = 0; r < an_rows(t); r++) {
      fprintf(f, "\n|");
      for (int c = 0; c < t->ncols; c++) md_cell(f, t->cells[r * t->ncols + c].s);
    }
    fprintf(f, "\n\n%s%s", t->note, t->note[0] ? "\n\n" : "");
  }
  if (doc->nnotes) fprintf(f, "Notes:\n\n");
  for (int i = 0; i < doc->nnotes; i++) fprintf(f, "- %s\n", doc->notes[i]);
  fprintf(f, "\n%d checks, %d failed (attn %s).\n", doc->checks, doc->failures, attn_version_string());
  return fclose(f);
}

static int write_json(const an_doc *doc, const char *dir) {
  FILE *f = open_out(dir, doc->name, "json");
  if (!f) return -1;
  fprintf(f, "{\n  \"tool\": \"attn-analyze\",\n  \"attn_version\": ");
  json_str(f, attn_version_string());
  fprintf(f, ",\n  \"isa\": ");
  json_str(f, attn_isa_name(attn_isa_get()));
  fprintf(f, ",\n  \"subcommand\": ");
  json_str(f, doc->name);
  fprintf(f, ",\n  \"title\": ");
  json_str(f, doc->title);
  fprintf(f, ",\n  \"checks\": %d,\n  \"failures\": %d,\n  \"notes\": [", doc->checks, doc->failures);
  for (int i = 0; i < doc->nnotes; i++) {
    fprintf(f, "%s\n    ", i ? "," : "");
    json_str(f, doc->notes[i]);
  }
  fprintf(f, "],\n  \"tables\": [");
  for (int i = 0; i < doc->ntables; i++) {
    const an_table *t = &doc->tables[i];
    fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
    json_str(f, t->name);
    fprintf(f, ", \"title\": ");
    json_str(f, t->title);
    fprintf(f, ", \"note\": ");
    json_str(f, t->note);
    fprintf(f, ",\n     \"rows\": [");
    for (size_t r = 0; r < an_rows(t); r++) {
      fprintf(f, "%s\n      {", r ? "," : "");
      for (int c = 0; c < t->ncols; c++) {
        const an_cell *cell = &t->cells[r * t->ncols + c];
        fprintf(f, "%s", c ? ", " : "");
        json_str(f, t->cols[c]);
        fprintf(f, ": ");
        if (cell->is_num)
          fprintf(f, "%.9g", cell->v);
        else if (strcmp(cell->s, "-") == 0)
          fprintf(f, "null");
        else
          json_str(f, cell->s);
      }
      fprintf(f, "}");
    }
    fprintf(f, "]}");
  }
  fprintf(f, "\n  ]\n}\n");
  return fclose(f);
}

int an_doc_write(const an_doc *doc, const char *dir) {
  if (mkdir_p(dir)) {
    fprintf(stderr, "attn-analyze: cannot create %s: %s\n", dir, strerror(errno));
    return -1;
  }
  int rc = write_md(doc, dir);
  rc |= write_json(doc, dir);
  for (int i = 0; i < doc->ntables; i++) {
    const an_table *t = &doc->tables[i];
    char stem[80];
    snprintf(stem, sizeof stem, "%s_%s", doc->name, t->name);
    FILE *f = open_out(dir, stem, "csv");
    if (!f) return -1;
    for (int c = 0; c < t->ncols; c++) fprintf(f, "%s%s", c ? "," : "", t->cols[c]);
    for (size_t r = 0; r < an_rows(t); r++) {
      fputc('\n', f);
      for (int c = 0; c < t->ncols; c++) {
        if (c) fputc(',', f);
        csv_cell(f, &t->cells[r * t->ncols + c]);
      }
    }
    fputc('\n', f);
    rc |= fclose(f);
  }
  return rc ? -1 : 0;
}
