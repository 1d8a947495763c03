/* Heap allocations per I/O through libmqblk's C API, counted by wrapping
 * malloc and its relatives (the executable's definitions take precedence
 * over libc's for libmqblk.so too). After a warm-up, a loop of reads and
 * writes at queue depth 32 with completions collected by polling must
 * allocate nothing, and copy nothing. Prints "allocations per I/O: N". */
#define _GNU_SOURCE
#include <mqblk.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static unsigned long allocs;

void *malloc(size_t n)
{
	allocs++;
	return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
	allocs++;
	return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
	allocs++;
	return __libc_realloc(p, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	allocs++;
	p = __libc_memalign(align, n);
	if (!p)
		return 12;
	*out = p;
	return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
	allocs++;
	return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n)
{
	allocs++;
	return __libc_memalign(align, n);
}

#define DEPTH 32
#define BS 4096u

static long run(struct mqblk_queue *q, unsigned char **bufs, long ios)
{
	struct mqblk_completion done[DEPTH];
	long issued = 0, completed = 0;
	int i, n;

	for (i = 0; i < DEPTH && issued < ios; i++, issued++)
		mqblk_queue_read(q, (uint64_t)(issued % 1024) * BS, bufs[i], BS, bufs[i], 0);
	while (completed < ios) {
		n = mqblk_queue_do_io(q, done, 1, DEPTH);
		if (n < 0)
			return -1;
		for (i = 0; i < n; i++, completed++) {
			unsigned char *b = done[i].user_data;

			if (done[i].ret)
				return -1;
			if (issued < ios) {
				if (issued & 1)
					mqblk_queue_write(q, (uint64_t)(issued % 1024) * BS, b, BS, b, 0);
				else
					mqblk_queue_read(q, (uint64_t)(issued % 1024) * BS, b, BS, b, 0);
				issued++;
			}
		}
	}
	return completed;
}

int main(int argc, char **argv)
{
	const char *spec = argc > 1 ? argv[1] : "ram,size=16M";
	long ios = argc > 2 ? atol(argv[2]) : 200000;
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_stats st;
	unsigned char *bufs[DEPTH];
	unsigned long before, after;
	int i;

	if (mqblk_open(spec, &dev) || mqblk_queue_create(dev, &q)) {
		fprintf(stderr, "%s\n", mqblk_get_error_msg());
		return 1;
	}
	for (i = 0; i < DEPTH; i++)
		bufs[i] = mqblk_alloc_buf(dev, BS);
	if (run(q, bufs, 10000) < 0)
		return 1;
	before = allocs;
	if (run(q, bufs, ios) != ios)
		return 1;
	after = allocs;
	mqblk_queue_get_stats(q, &st);
	printf("setup: %lu allocations; %ld I/Os on %s: %lu allocations, allocations per I/O: %.6f, bytes copied: %llu\n",
	       before, ios, spec, after - before, (double)(after - before) / (double)ios,
	       (unsigned long long)st.bytes_copied);
	mqblk_queue_destroy(q);
	for (i = 0; i < DEPTH; i++)
		mqblk_free_buf(bufs[i]);
	mqblk_close(dev);
	return after == before && st.bytes_copied == 0 ? 0 : 1;
}
