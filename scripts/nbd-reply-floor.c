/* The floor under an NBD server's CPU per 4 KiB read, for
 * scripts/nbd-server-cpu.sh: over a unix socket pair, a "server" thread
 * reads requests (28 bytes each, as many as have come per read) and
 * writes a 16-byte header and 4 KiB of data per request, BATCH replies
 * per writev, and does nothing else; a "client" thread keeps DEPTH
 * requests in flight and sends a new one for each reply it reads, as
 * fio's nbd engine does. Prints the server thread's CPU per reply.
 *
 * Usage: nbd-reply-floor [REPLIES] [DEPTH] [BATCH]  (1000000 32 1) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

enum { REQ = 28, HDR = 16, DATA = 4096 };
static int sv[2];
static long n_total;
static int depth;
static int batch;

static void *client(void *arg) {
  (void)arg;
  char req[REQ * 256] = {0};
  static char rep[(HDR + DATA) * 256];
  long sent = 0, got = 0;
  while (sent < depth && sent < n_total) {
    if (write(sv[1], req, REQ) != REQ) abort();
    sent++;
  }
  size_t have = 0;
  while (got < n_total) {
    ssize_t r = read(sv[1], rep + have, sizeof rep - have);
    if (r <= 0) abort();
    have += r;
    long done = have / (HDR + DATA);
    have %= (HDR + DATA);
    got += done;
    long more = done;
    if (sent + more > n_total) more = n_total - sent;
    if (more > 0) {
      if (write(sv[1], req, REQ * more) != (ssize_t)(REQ * more)) abort();
      sent += more;
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  n_total = argc > 1 ? atol(argv[1]) : 1000000;
  depth = argc > 2 ? atoi(argv[2]) : 32;
  batch = argc > 3 ? atoi(argv[3]) : 1; /* replies per writev */
  if (depth < 1 || depth > 256 || batch < 1 || batch > 256) {
    fprintf(stderr, "nbd-reply-floor: DEPTH and BATCH are 1 to 256\n");
    return 2;
  }
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
  pthread_t t;
  pthread_create(&t, NULL, client, NULL);
  static char data[DATA];
  char hdr[HDR] = {0};
  char reqs[REQ * 256];
  struct rusage a, b;
  getrusage(RUSAGE_THREAD, &a);
  long replied = 0;
  size_t pending = 0;
  struct iovec iov[512];
  while (replied < n_total) {
    ssize_t r = read(sv[0], reqs + pending, sizeof reqs - pending);
    if (r <= 0) abort();
    pending += r;
    long n = pending / REQ;
    pending %= REQ;
    for (long i = 0; i < n; i += batch) {
      int k = 0;
      for (long j = i; j < n && j < i + batch; j++) {
        iov[k].iov_base = hdr; iov[k++].iov_len = HDR;
        iov[k].iov_base = data; iov[k++].iov_len = DATA;
      }
      if (writev(sv[0], iov, k) <= 0) abort();
    }
    replied += n;
  }
  getrusage(RUSAGE_THREAD, &b);
  pthread_join(t, NULL);
  double u = (b.ru_utime.tv_sec - a.ru_utime.tv_sec) * 1e9 + (b.ru_utime.tv_usec - a.ru_utime.tv_usec) * 1e3;
  double s = (b.ru_stime.tv_sec - a.ru_stime.tv_sec) * 1e9 + (b.ru_stime.tv_usec - a.ru_stime.tv_usec) * 1e3;
  printf("depth %d, %d replies per writev: server thread %.0f ns per reply (user %.0f, system %.0f)\n",
         depth, batch, (u + s) / n_total, u / n_total, s / n_total);
  return 0;
}
