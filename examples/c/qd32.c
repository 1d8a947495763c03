/* The cost of an I/O through the C API: 32 random 4 KiB reads submitted
 * with mqblk_queue_read(), then mqblk_queue_do_io(q, c, 1, 32) until all
 * 32 are back, over and over, for a second (or SECONDS). Prints the IOPS,
 * to compare with `mqblk bench --rw=randread --iodepth=32` on the same
 * device spec.
 *
 * Build: cc -std=c11 -O2 -o qd32 qd32.c $(pkg-config --cflags --libs mqblk)
 * Run:   ./qd32 [SPEC [SECONDS]]      (default: null,size=1G 1)
 */
#define _POSIX_C_SOURCE 200809L
#include <mqblk.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define QD 32
#define BS 4096u

static int fail(const char *what, int rc)
{
	const char *msg = mqblk_get_error_msg();

	fprintf(stderr, "%s: %s\n", what, *msg ? msg : mqblk_strerror(rc));
	return 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: the offsets, as mqblk bench draws its own. */
static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545f4914f6cdd1dull;
}

/* Uniform in 0..n for n below 2^32, by a multiply, not a division. */
static uint64_t below(uint64_t *x, uint64_t n)
{
	return ((next_rand(x) >> 32) * n) >> 32;
}

int main(int argc, char **argv)
{
	const char *spec = argc > 1 ? argv[1] : "null,size=1G";
	double seconds = argc > 2 ? atof(argv[2]) : 1.0;
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_info info;
	struct mqblk_completion done[QD];
	void *bufs[QD];
	uint64_t blocks, ios = 0, errors = 0, rng = 0x6d71626c6b000001ull;
	uint64_t start, end, deadline;
	int rc, i, status = 1;

	rc = mqblk_open(spec, &dev);
	if (rc < 0)
		return fail("mqblk_open", rc);
	mqblk_get_info(dev, &info);
	blocks = info.capacity_bytes / BS;
	if (blocks > UINT32_MAX)
		blocks = UINT32_MAX;
	rc = mqblk_queue_create(dev, &q);
	if (rc < 0) {
		fail("mqblk_queue_create", rc);
		goto out_dev;
	}
	for (i = 0; i < QD; i++)
		bufs[i] = mqblk_alloc_buf(dev, BS);

	start = now_ns();
	deadline = start + (uint64_t)(seconds * 1e9);
	do {
		/* A few rounds between clock reads: the clock is not the cost
		 * measured. */
		for (int round = 0; round < 64; round++) {
			int left = QD;

			for (i = 0; i < QD; i++) {
				uint64_t off = below(&rng, blocks) * BS;

				rc = mqblk_queue_read(q, off, bufs[i], BS, bufs[i], 0);
				if (rc < 0) {
					fail("mqblk_queue_read", rc);
					goto out_q;
				}
			}
			while (left > 0) {
				int n = mqblk_queue_do_io(q, done, 1, QD);

				if (n < 0) {
					fail("mqblk_queue_do_io", n);
					goto out_q;
				}
				for (i = 0; i < n; i++)
					errors += done[i].ret != 0;
				left -= n;
			}
			ios += QD;
		}
		end = now_ns();
	} while (end < deadline);

	printf("qd32: %s: %llu reads of %u bytes in %.3f s: %.0f IOPS (%llu errors)\n", spec,
	       (unsigned long long)ios, BS, (double)(end - start) / 1e9,
	       (double)ios * 1e9 / (double)(end - start), (unsigned long long)errors);
	status = errors != 0;
out_q:
	mqblk_queue_destroy(q);
	for (i = 0; i < QD; i++)
		mqblk_free_buf(bufs[i]);
out_dev:
	mqblk_close(dev);
	return status;
}
