/* Tests of libmqblk through its C ABI, built with the system compiler
 * through pkg-config and run under ASan+UBSan and under valgrind by
 * tests/c.rs. Prints one line per check and "N passed, N failed". */
/* mkdtemp and P_tmpdir under -std=c11. */
#define _XOPEN_SOURCE 700

#include <mqblk.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (cond) {                                                      \
			passed++;                                                \
		} else {                                                         \
			failed++;                                                \
			printf("FAILED %s:%d: %s (last error: %s)\n", __FILE__, \
			       __LINE__, #cond, mqblk_get_error_msg());          \
		}                                                                \
	} while (0)

#define BS 4096u

static void test_errors(void)
{
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_info info;
	struct mqblk_completion c;

	/* NULL everywhere: a typed error, never a crash. */
	CHECK(mqblk_open(NULL, &dev) == MQBLK_ERROR_NULL);
	CHECK(strstr(mqblk_get_error_msg(), "spec") != NULL);
	CHECK(mqblk_open("null", NULL) == MQBLK_ERROR_NULL);
	CHECK(mqblk_get_info(NULL, &info) == MQBLK_ERROR_NULL);
	CHECK(mqblk_get_capacity(NULL) == 0);
	CHECK(mqblk_queue_create(NULL, &q) == MQBLK_ERROR_NULL);
	CHECK(mqblk_queue_read(NULL, 0, &c, 8, NULL, 0) == MQBLK_ERROR_NULL);
	CHECK(mqblk_queue_do_io(NULL, &c, 0, 1) == MQBLK_ERROR_NULL);
	CHECK(mqblk_queue_completion_fd(NULL) == MQBLK_ERROR_NULL);
	CHECK(mqblk_alloc_buf(NULL, 4096) == NULL);
	mqblk_close(NULL);
	mqblk_queue_destroy(NULL);
	mqblk_free_buf(NULL);

	/* A bad spec names what is wrong. */
	CHECK(mqblk_open("nosuchkind", &dev) == MQBLK_ERROR_SPEC);
	CHECK(strstr(mqblk_get_error_msg(), "nosuchkind") != NULL);
	CHECK(dev == NULL);
	CHECK(mqblk_open("null,size=banana", &dev) < 0);
	CHECK(strcmp(mqblk_strerror(MQBLK_ERROR_RANGE), "the I/O runs past the end of the device") == 0);
	CHECK(strcmp(mqblk_strerror(12345), "unknown mqblk error code") == 0);
	CHECK(strlen(mqblk_version()) > 0);

	CHECK(mqblk_open("null,size=1M", &dev) == MQBLK_ERROR_OK);
	CHECK(mqblk_queue_create(dev, &q) == MQBLK_ERROR_OK);
	{
		unsigned char *buf = mqblk_alloc_buf(dev, BS);

		CHECK(buf != NULL);
		CHECK(((uintptr_t)buf % 4096) == 0);
		CHECK(mqblk_queue_read(q, 0, NULL, BS, NULL, 0) == MQBLK_ERROR_NULL);
		CHECK(mqblk_queue_read(q, 0, buf, BS, NULL, 0x80) == MQBLK_ERROR_INVAL);
		CHECK(strstr(mqblk_get_error_msg(), "flag") != NULL);
		CHECK(mqblk_queue_readv(q, 0, NULL, 1, NULL, 0) == MQBLK_ERROR_NULL);
		CHECK(mqblk_queue_do_io(q, NULL, 0, 1) == MQBLK_ERROR_NULL);
		CHECK(mqblk_queue_do_io(q, &c, 2, 1) == MQBLK_ERROR_INVAL);

		/* Bad requests complete with their error. */
		CHECK(mqblk_queue_read(q, 1 << 20, buf, BS, (void *)1, 0) == 0);
		CHECK(mqblk_queue_do_io(q, &c, 1, 1) == 1);
		CHECK(c.user_data == (void *)1);
		CHECK(c.ret == MQBLK_ERROR_RANGE);
		CHECK(c.errno_value == ENOSPC);
		CHECK(mqblk_queue_read(q, 0, buf, 100, (void *)2, 0) == 0);
		CHECK(mqblk_queue_do_io(q, &c, 1, 1) == 1);
		CHECK(c.ret == MQBLK_ERROR_INVAL);
		CHECK(mqblk_queue_read(q, 0, buf, 0, (void *)3, 0) == 0);
		CHECK(mqblk_queue_do_io(q, &c, 1, 1) == 1);
		CHECK(c.ret == MQBLK_ERROR_INVAL);
		/* Nothing in flight: a blocking wait returns what there is. */
		CHECK(mqblk_queue_do_io(q, &c, 1, 1) == 0);
		mqblk_free_buf(buf);
	}
	mqblk_queue_destroy(q);
	mqblk_close(dev);
}

static void test_read_only(void)
{
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_completion c;
	unsigned char *buf;

	CHECK(mqblk_open("ram,size=1M,ro=1", &dev) == 0);
	if (!dev)
		return;
	CHECK(mqblk_queue_create(dev, &q) == 0);
	buf = mqblk_alloc_buf(dev, BS);
	CHECK(mqblk_queue_write(q, 0, buf, BS, NULL, 0) == 0);
	CHECK(mqblk_queue_do_io(q, &c, 1, 1) == 1);
	CHECK(c.ret == MQBLK_ERROR_READ_ONLY);
	mqblk_queue_destroy(q);
	mqblk_free_buf(buf);
	mqblk_close(dev);
}

/* Data goes through unchanged, in every submission shape and every way of
 * collecting completions, with user pointers returned as given. */
static void test_data(void)
{
	enum { N = 32 };
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_completion done[N];
	struct mqblk_info info;
	struct mqblk_stats st;
	unsigned char *wbuf[N], *rbuf[N];
	int seen[N];
	int i, n, got, fd;

	CHECK(mqblk_open("ram,size=16M", &dev) == 0);
	if (!dev)
		return;
	CHECK(mqblk_get_info(dev, &info) == 0);
	CHECK(info.capacity_bytes == 16u << 20);
	CHECK(info.logical_block_size == 512);
	CHECK(mqblk_get_block_size(dev) == 512);
	CHECK(strlen(mqblk_get_name(dev)) > 0);
	CHECK(mqblk_queue_create(dev, &q) == 0);
	for (i = 0; i < N; i++) {
		wbuf[i] = mqblk_alloc_buf(dev, BS);
		rbuf[i] = mqblk_alloc_buf(dev, BS);
		memset(wbuf[i], i * 7 + 1, BS);
		seen[i] = 0;
	}

	/* Writes with FUA, blocking for all of them. */
	for (i = 0; i < N; i++)
		CHECK(mqblk_queue_write(q, (uint64_t)i * BS, wbuf[i], BS, &seen[i], MQBLK_REQ_FUA) == 0);
	n = mqblk_queue_do_io(q, done, N, N);
	CHECK(n == N);
	for (i = 0; i < n; i++) {
		CHECK(done[i].ret == 0);
		(*(int *)done[i].user_data)++;
	}
	for (i = 0; i < N; i++)
		CHECK(seen[i] == 1);

	/* Reads, collected a few at a time by polling (max < ready). */
	for (i = 0; i < N; i++)
		CHECK(mqblk_queue_read(q, (uint64_t)i * BS, rbuf[i], BS, rbuf[i], 0) == 0);
	CHECK(mqblk_queue_commit(q) == 0);
	got = 0;
	while (got < N) {
		n = mqblk_queue_do_io(q, done, 0, 3);
		CHECK(n >= 0 && n <= 3);
		if (n < 0)
			break;
		got += n;
	}
	for (i = 0; i < N; i++)
		CHECK(memcmp(wbuf[i], rbuf[i], BS) == 0);

	/* Vectors: write two halves from two buffers, read them back crossed. */
	{
		struct iovec w[2] = { { wbuf[0], BS / 2 }, { wbuf[1], BS / 2 } };
		struct iovec r[2] = { { rbuf[2], BS / 2 }, { rbuf[3], BS / 2 } };

		CHECK(mqblk_queue_writev(q, 64 * BS, w, 2, NULL, 0) == 0);
		CHECK(mqblk_queue_do_io(q, done, 1, 1) == 1 && done[0].ret == 0);
		CHECK(mqblk_queue_readv(q, 64 * BS, r, 2, NULL, 0) == 0);
		CHECK(mqblk_queue_do_io(q, done, 1, 1) == 1 && done[0].ret == 0);
		CHECK(memcmp(rbuf[2], wbuf[0], BS / 2) == 0);
		CHECK(memcmp(rbuf[3], wbuf[1], BS / 2) == 0);
	}

	/* Flush, discard and write-zeroes, through the completion fd. */
	fd = mqblk_queue_completion_fd(q);
	CHECK(fd >= 0);
	CHECK(mqblk_queue_completion_fd(q) == fd);
	CHECK(mqblk_queue_flush(q, (void *)10, 0) == 0);
	CHECK(mqblk_queue_write_zeroes(q, 0, BS, (void *)11, 0) == 0);
	CHECK(mqblk_queue_commit(q) == 0);
	got = 0;
	for (i = 0; i < 1000 && got < 2; i++) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		CHECK(poll(&pfd, 1, 5000) >= 0);
		n = mqblk_queue_do_io(q, done + got, 0, N - got);
		CHECK(n >= 0);
		got += n > 0 ? n : 0;
	}
	CHECK(got == 2);
	for (i = 0; i < got; i++)
		CHECK(done[i].ret == 0);
	CHECK(mqblk_queue_read(q, 0, rbuf[0], BS, NULL, 0) == 0);
	CHECK(mqblk_queue_do_io(q, done, 1, 1) == 1);
	for (i = 0; i < (int)BS; i++)
		if (rbuf[0][i] != 0)
			break;
	CHECK(i == (int)BS);
	if (info.discard) {
		CHECK(mqblk_queue_discard(q, BS, BS, NULL, 0) == 0);
		CHECK(mqblk_queue_do_io(q, done, 1, 1) == 1 && done[0].ret == 0);
	}

	CHECK(mqblk_queue_get_stats(q, &st) == 0);
	/* Sequential bios merge in the plug: count bios, not requests. */
	CHECK(st.write_ios + st.write_merges >= N + 1);
	CHECK(st.read_ios + st.read_merges >= N + 2);
	CHECK(st.bios >= 2 * N + 5);
	CHECK(st.bytes_copied == 0);

	/* Leave a request in flight: destroying the queue waits for it. */
	CHECK(mqblk_queue_write(q, 0, wbuf[0], BS, NULL, 0) == 0);
	mqblk_queue_destroy(q);
	CHECK(mqblk_get_stats(dev, &st) == 0);
	CHECK(st.in_flight == 0);
	for (i = 0; i < N; i++) {
		mqblk_free_buf(wbuf[i]);
		mqblk_free_buf(rbuf[i]);
	}
	mqblk_close(dev);
}

/* A queue outlives the device handle it was made from. */
static void test_queue_outlives_close(void)
{
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_completion c;
	unsigned char *buf;

	CHECK(mqblk_open("null", &dev) == 0);
	CHECK(mqblk_queue_create(dev, &q) == 0);
	buf = mqblk_alloc_buf(dev, BS);
	mqblk_close(dev);
	CHECK(mqblk_queue_read(q, 0, buf, BS, NULL, 0) == 0);
	CHECK(mqblk_queue_do_io(q, &c, 1, 1) == 1 && c.ret == 0);
	mqblk_queue_destroy(q);
	mqblk_free_buf(buf);
}

/* A wait with a time limit: a request that takes 200 ms is not there
 * after 10 ms, and is after at most 5 s. */
static void test_timeout(void)
{
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_completion c;
	unsigned char *buf;

	CHECK(mqblk_open("null,completion=timer,completion_nsec=200000000", &dev) == 0);
	if (!dev)
		return;
	CHECK(mqblk_queue_create(dev, &q) == 0);
	buf = mqblk_alloc_buf(dev, BS);
	/* Nothing in flight: returns at once. */
	CHECK(mqblk_queue_do_io_timeout(q, &c, 1, 1, 1000000000) == 0);
	CHECK(mqblk_queue_read(q, 0, buf, BS, (void *)7, 0) == 0);
	CHECK(mqblk_queue_do_io_timeout(q, &c, 1, 1, 10000000) == 0);
	CHECK(mqblk_queue_do_io_timeout(q, &c, 1, 1, 5000000000LL) == 1);
	CHECK(c.user_data == (void *)7 && c.ret == 0);
	CHECK(mqblk_queue_do_io_timeout(q, &c, 2, 1, 0) == MQBLK_ERROR_INVAL);
	mqblk_queue_destroy(q);
	mqblk_free_buf(buf);
	mqblk_close(dev);
}

/* The size of DIR/NAME.blktrace.N, or -1; `unlink_it` removes it. */
static long long file_size(const char *dir, const char *name, int n, int unlink_it)
{
	char path[4096];
	struct stat st;
	long long size;

	snprintf(path, sizeof(path), "%s/%s.blktrace.%d", dir, name, n);
	size = stat(path, &st) == 0 ? (long long)st.st_size : -1;
	if (unlink_it)
		unlink(path);
	return size;
}

/* blktrace files: started and stopped on an open device, or from the
 * spec; every record is 48 bytes or more. */
static void test_trace(void)
{
	char dir[256];
	char spec[512];
	struct mqblk *dev = NULL;
	struct mqblk_queue *q = NULL;
	struct mqblk_completion c;
	unsigned char *buf;
	char name[64];
	int i;

	snprintf(dir, sizeof(dir), "%s/mqblk-capi-trace-XXXXXX", P_tmpdir);
	CHECK(mkdtemp(dir) != NULL);
	CHECK(mqblk_trace_start(NULL, dir) == MQBLK_ERROR_NULL);
	CHECK(mqblk_open("null,size=1M", &dev) == 0);
	if (!dev)
		return;
	snprintf(name, sizeof(name), "%s", mqblk_get_name(dev));
	CHECK(mqblk_trace_start(dev, NULL) == MQBLK_ERROR_NULL);
	CHECK(mqblk_trace_stop(dev) < 0);
	CHECK(strstr(mqblk_get_error_msg(), "not being traced") != NULL);
	CHECK(mqblk_trace_start(dev, dir) == 0);
	CHECK(mqblk_queue_create(dev, &q) == 0);
	buf = mqblk_alloc_buf(dev, BS);
	for (i = 0; i < 8; i++) {
		CHECK(mqblk_queue_read(q, (uint64_t)i * BS, buf, BS, NULL, 0) == 0);
		CHECK(mqblk_queue_do_io(q, &c, 1, 1) == 1 && c.ret == 0);
	}
	CHECK(mqblk_trace_stop(dev) == 0);
	/* A name, then per read Q G I U D C, and one P: at least 8 * 6 records. */
	CHECK(file_size(dir, name, 0, 1) >= 8 * 6 * 48);
	CHECK(file_size(dir, name, 1, 0) == -1);
	mqblk_queue_destroy(q);
	mqblk_free_buf(buf);
	mqblk_close(dev);

	snprintf(spec, sizeof(spec), "null,size=1M,trace=%s", dir);
	dev = NULL;
	CHECK(mqblk_open(spec, &dev) == 0);
	if (!dev)
		return;
	snprintf(name, sizeof(name), "%s", mqblk_get_name(dev));
	CHECK(mqblk_queue_create(dev, &q) == 0);
	buf = mqblk_alloc_buf(dev, BS);
	CHECK(mqblk_queue_write(q, 0, buf, BS, NULL, 0) == 0);
	CHECK(mqblk_queue_do_io(q, &c, 1, 1) == 1 && c.ret == 0);
	/* Closing the queue writes its records out. */
	mqblk_queue_destroy(q);
	CHECK(file_size(dir, name, 0, 1) >= 6 * 48);
	mqblk_free_buf(buf);
	mqblk_close(dev);
	CHECK(rmdir(dir) == 0);
}

int main(void)
{
	test_errors();
	test_read_only();
	test_data();
	test_queue_outlives_close();
	test_timeout();
	test_trace();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
