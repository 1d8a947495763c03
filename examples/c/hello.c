/* A tour of libmqblk: open a device from a spec, write and read through a
 * per-thread queue with each way of collecting completions (blocking,
 * polling, and the completion fd in poll(2)), and print the counters.
 *
 * Build: cc -std=c11 -Wall -Wextra -o hello hello.c $(pkg-config --cflags --libs mqblk)
 * Run:   ./hello [SPEC]        (default: ram,size=64M)
 */
#include <mqblk.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NR_BUFS 8
#define BUF_LEN 4096u

/* The thread's last error message says what was wrong (the spec and the
 * reason, the device, offset and limit); the code's text is a fallback. */
static int fail(const char *what, int rc)
{
	const char *msg = mqblk_get_error_msg();

	fprintf(stderr, "%s: %s\n", what, *msg ? msg : mqblk_strerror(rc));
	return 1;
}

int main(int argc, char **argv)
{
	const char *spec = argc > 1 ? argv[1] : "ram,size=64M";
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_info info;
	struct mqblk_stats st;
	struct mqblk_completion done[NR_BUFS];
	unsigned char *bufs[NR_BUFS];
	int rc, i, n, status = 1;

	rc = mqblk_open(spec, &dev);
	if (rc < 0)
		return fail("mqblk_open", rc);
	mqblk_get_info(dev, &info);
	printf("libmqblk %s: opened %s: %llu bytes, block %u, alignment %u, %u hw queues of depth %u\n",
	       mqblk_version(), mqblk_get_name(dev), (unsigned long long)info.capacity_bytes,
	       info.logical_block_size, info.buf_alignment, info.nr_hw_queues, info.queue_depth);

	rc = mqblk_queue_create(dev, &q);
	if (rc < 0) {
		fail("mqblk_queue_create", rc);
		goto out_dev;
	}
	for (i = 0; i < NR_BUFS; i++)
		bufs[i] = mqblk_alloc_buf(dev, BUF_LEN);

	/* 1. Writes, collected by blocking until all have completed. */
	for (i = 0; i < NR_BUFS; i++) {
		memset(bufs[i], 'a' + i, BUF_LEN);
		rc = mqblk_queue_write(q, (uint64_t)i * BUF_LEN, bufs[i], BUF_LEN, bufs[i], 0);
		if (rc < 0) {
			fail("mqblk_queue_write", rc);
			goto out_q;
		}
	}
	n = mqblk_queue_do_io(q, done, NR_BUFS, NR_BUFS);
	for (i = 0; i < n; i++)
		if (done[i].ret != MQBLK_ERROR_OK)
			printf("write failed: %s\n", mqblk_strerror(done[i].ret));
	printf("blocking: %d writes of %u bytes completed\n", n, BUF_LEN);

	/* 2. One vectored read of two buffers, then a flush, collected by polling. */
	memset(bufs[0], 0, BUF_LEN);
	memset(bufs[1], 0, BUF_LEN);
	{
		struct iovec iov[2] = { { bufs[0], BUF_LEN }, { bufs[1], BUF_LEN } };
		mqblk_queue_readv(q, 2 * BUF_LEN, iov, 2, (void *)"readv", 0);
	}
	mqblk_queue_flush(q, (void *)"flush", 0);
	mqblk_queue_commit(q);
	n = 0;
	while (n < 2) {
		rc = mqblk_queue_do_io(q, done + n, 0, NR_BUFS - n);
		if (rc < 0) {
			fail("mqblk_queue_do_io", rc);
			goto out_q;
		}
		n += rc;
	}
	for (i = 0; i < n; i++)
		printf("polling: %s completed: %s\n", (const char *)done[i].user_data, mqblk_strerror(done[i].ret));
	printf("readv got '%c' and '%c' (wrote 'c' and 'd')\n", bufs[0][0], bufs[1][BUF_LEN - 1]);

	/* 3. Discard and write-zeroes, collected through the completion fd. */
	{
		int fd = mqblk_queue_completion_fd(q);
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int got = 0;

		mqblk_queue_discard(q, 4 * BUF_LEN, BUF_LEN, (void *)"discard", 0);
		mqblk_queue_write_zeroes(q, 5 * BUF_LEN, BUF_LEN, (void *)"write-zeroes", 0);
		mqblk_queue_commit(q);
		while (got < 2) {
			if (poll(&pfd, 1, 1000) < 0)
				break;
			rc = mqblk_queue_do_io(q, done, 0, NR_BUFS);
			for (i = 0; i < rc; i++)
				printf("completion fd: %s completed: %s\n", (const char *)done[i].user_data,
				       mqblk_strerror(done[i].ret));
			got += rc > 0 ? rc : 0;
		}
	}

	/* 4. A bad request: it completes with a typed error. */
	mqblk_queue_read(q, info.capacity_bytes, bufs[0], BUF_LEN, NULL, 0);
	n = mqblk_queue_do_io(q, done, 1, 1);
	if (n == 1)
		printf("read past the end: %s\n", mqblk_strerror(done[0].ret));
	{
		struct mqblk *bad = NULL;

		rc = mqblk_open("nosuchdevice", &bad);
	}
	printf("opening \"nosuchdevice\" failed (%d): %s\n", rc, mqblk_get_error_msg());

	mqblk_queue_get_stats(q, &st);
	printf("queue stats: %llu reads, %llu writes, %llu discards, %llu flushes, %llu bios, %llu requests, %llu bytes copied\n",
	       (unsigned long long)st.read_ios, (unsigned long long)st.write_ios,
	       (unsigned long long)st.discard_ios, (unsigned long long)st.flush_ios,
	       (unsigned long long)st.bios, (unsigned long long)st.requests,
	       (unsigned long long)st.bytes_copied);
	status = 0;
out_q:
	mqblk_queue_destroy(q);
	for (i = 0; i < NR_BUFS; i++)
		mqblk_free_buf(bufs[i]);
out_dev:
	mqblk_close(dev);
	return status;
}
