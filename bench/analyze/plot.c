/* gnuplot scripts over the documents' CSV files, rendered to SVG when gnuplot is installed. The
 * script sits next to its CSVs and names them without a directory: `cd DIR && gnuplot NAME.gp`
 * redraws a plot. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analyze.h"

void an_plot_printf(an_plot *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (p->f) vfprintf(p->f, fmt, ap);
  va_end(ap);
}

void an_plot_csv(char *buf, size_t len, const an_doc *doc, const char *table) {
  snprintf(buf, len, "%s_%s.csv", doc->name, table);
}

int an_plot_begin(an_plot *p, const char *dir, const char *name, int width, int height, int rows, int cols,
                  const char *title) {
  snprintf(p->path, sizeof p->path, "%s/%s.gp", dir, name);
  FILE *f = fopen(p->path, "w");
  p->f = f;
  if (!f) return -1;
  fprintf(f, "# attn-analyze plot; redraw with: cd %s && gnuplot %s.gp\n", dir, name);
  fprintf(f, "set terminal svg size %d,%d dynamic font 'Helvetica,11' noenhanced background rgb 'white'\n", width,
          height);
  fprintf(f, "set output '%s.svg'\nset datafile separator ','\nset key autotitle columnhead\n", name);
  fprintf(f, "set grid\nset key font ',9' samplen 2\n");
  fprintf(f, "set multiplot layout %d,%d title '", rows, cols);
  for (; *title; title++) { /* '' is a quote in '...' */
    if (*title == '\'') fputc('\'', f);
    fputc(*title, f);
  }
  fprintf(f, "'\n");
  return 0;
}

/* Run gnuplot in the script's directory. */
int an_plot_end(an_plot *p, int run, char *msg, size_t msglen) {
  FILE *f = p->f;
  if (!f) {
    snprintf(msg, msglen, "cannot write %s", p->path);
    return -1;
  }
  fprintf(f, "unset multiplot\n");
  p->f = NULL;
  if (fclose(f)) {
    snprintf(msg, msglen, "cannot write %s", p->path);
    return -1;
  }
  if (!run) {
    snprintf(msg, msglen, "plots off: script %s", p->path);
    return 0;
  }
  char dir[1024], *slash;
  snprintf(dir, sizeof dir, "%s", p->path);
  slash = strrchr(dir, '/');
  *slash = 0;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (chdir(dir) == 0) execlp("gnuplot", "gnuplot", slash + 1, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) {
    snprintf(msg, msglen, "gnuplot did not run on %s", p->path);
    return -1;
  }
  if (WEXITSTATUS(status) == 127) {
    snprintf(msg, msglen, "gnuplot not found (install gnuplot-nox): no SVG; the script is %s", p->path);
    return 0;
  }
  if (WEXITSTATUS(status)) {
    snprintf(msg, msglen, "gnuplot failed on %s", p->path);
    return -1;
  }
  snprintf(msg, msglen, "%.*s.svg (script %s)", (int)(strlen(p->path) - 3), p->path, p->path);
  return 1;
}
