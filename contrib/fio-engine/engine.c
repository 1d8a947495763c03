/*
 * fio ioengine for mqblk: fio's workloads through mqblk's block layer,
 * on top of libmqblk.
 *
 *   fio --ioengine=external:PATH/libmqblk-fio.so --mqblk_spec=ram,size=1G ...
 *   fio --ioengine=external:PATH/libmqblk-fio.so --filename=/dev/zram0 ...
 *
 * Each fio file is one mqblk device: the engine option mqblk_spec names it
 * (`null`, `ram,size=1G`, `file:/dev/loop0,direct=1`, `nbd://...`), and
 * without it the file is opened as `file:FILENAME` (created with fio's
 * size if it does not exist). Each job thread gets its own mqblk queue per
 * file; a device is shared by the jobs of one process and kept open until
 * the process exits, so a later verify pass reads what a write pass wrote.
 *
 * fio commits each I/O (iodepth_batch=1): the queue's plug carries those
 * commits until fio waits for completions or the plug is full, so the layer
 * dispatches batches (mqblk_unplug=1 hands each commit over at once).
 *
 * Build with contrib/fio-engine/build.sh OUTDIR.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fio.h"
#include "optgroup.h"

#include <mqblk.h>

struct mqblk_fio_options {
	void *pad; /* fio keeps its own pointer here */
	char *spec;
	unsigned int unplug;
};

static struct fio_option options[] = {
	{
		.name = "mqblk_spec",
		.lname = "mqblk device spec",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct mqblk_fio_options, spec),
		.help = "mqblk device spec (null, ram,size=1G, file:PATH, nbd://...); default: file:FILENAME",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "mqblk_unplug",
		.lname = "mqblk unplug at each commit",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct mqblk_fio_options, unplug),
		.def = "0",
		.help = "1: hand each commit to the device at once; 0 (default): the queue's plug "
			"carries commits until fio waits for completions, or until it is full",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = NULL,
	},
};

/* The devices this process opened, by spec. */
struct dev_entry {
	struct dev_entry *next;
	char *spec;
	struct mqblk *dev;
	pid_t owner;
};

static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dev_entry *devs;

/* One fio file of one job. */
struct mqblk_fio_file {
	pid_t owner; /* fio may size files in its parent before forking a job */
	struct mqblk *dev;
	struct mqblk_queue *q;
	unsigned int in_flight;
};

/* One job's engine state. */
struct mqblk_fio_data {
	struct mqblk_completion *comps;
	struct io_u **events;
	struct io_u **queued;
	unsigned int nr_queued;
	unsigned int depth;
};

static int spec_of(struct thread_data *td, struct fio_file *f, char **out)
{
	struct mqblk_fio_options *o = td->eo;
	struct stat st;

	if (o && o->spec && o->spec[0]) {
		*out = strdup(o->spec);
		return *out ? 0 : ENOMEM;
	}
	/* A path: the file device, created with fio's size if missing. */
	if (stat(f->file_name, &st) < 0) {
		int fd;

		if (errno != ENOENT || !td->o.size) {
			log_err("mqblk: %s: %s; give mqblk_spec=SPEC or an existing file\n",
				f->file_name, strerror(errno));
			return errno ? errno : EINVAL;
		}
		fd = open(f->file_name, O_CREAT | O_WRONLY, 0644);
		if (fd < 0 || ftruncate(fd, (off_t)td->o.size) < 0) {
			int err = errno;

			log_err("mqblk: cannot create %s: %s\n", f->file_name, strerror(err));
			if (fd >= 0)
				close(fd);
			return err;
		}
		close(fd);
	}
	if (asprintf(out, "file:%s", f->file_name) < 0)
		return ENOMEM;
	return 0;
}

/* The device for `spec`, opened once per process. */
static struct mqblk *device_get(const char *spec)
{
	struct dev_entry *e;
	struct mqblk *dev = NULL;
	pid_t me = getpid();
	int rc;

	pthread_mutex_lock(&devs_lock);
	for (e = devs; e; e = e->next) {
		/* A device opened before a fork belongs to the parent. */
		if (e->owner == me && !strcmp(e->spec, spec)) {
			dev = e->dev;
			goto out;
		}
	}
	rc = mqblk_open(spec, &dev);
	if (rc < 0) {
		log_err("mqblk: cannot open %s: %s\n", spec, mqblk_get_error_msg());
		dev = NULL;
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (!e || !(e->spec = strdup(spec))) {
		free(e);
		mqblk_close(dev);
		dev = NULL;
		goto out;
	}
	e->dev = dev;
	e->owner = me;
	e->next = devs;
	devs = e;
out:
	pthread_mutex_unlock(&devs_lock);
	return dev;
}

static void __attribute__((destructor)) devices_close(void)
{
	struct dev_entry *e, *next;
	pid_t me = getpid();

	pthread_mutex_lock(&devs_lock);
	for (e = devs; e; e = next) {
		next = e->next;
		if (e->owner == me)
			mqblk_close(e->dev);
		free(e->spec);
		free(e);
	}
	devs = NULL;
	pthread_mutex_unlock(&devs_lock);
}

static struct mqblk_fio_file *file_data(struct thread_data *td, struct fio_file *f)
{
	struct mqblk_fio_file *mf = FILE_ENG_DATA(f);
	char *spec = NULL;
	int err;

	if (mf && mf->dev && mf->owner == getpid())
		return mf;
	if (mf && mf->owner != getpid()) {
		/* The parent's: its device and queue stay the parent's. */
		mf = NULL;
	}
	if (!mf) {
		mf = calloc(1, sizeof(*mf));
		if (!mf) {
			td_verror(td, ENOMEM, "calloc");
			return NULL;
		}
		FILE_SET_ENG_DATA(f, mf);
	}
	err = spec_of(td, f, &spec);
	if (err) {
		td_verror(td, err, "mqblk_spec");
		return NULL;
	}
	mf->owner = getpid();
	mf->dev = device_get(spec);
	free(spec);
	if (!mf->dev) {
		td_verror(td, EINVAL, "mqblk_open");
		return NULL;
	}
	return mf;
}

static int fio_mqblk_get_file_size(struct thread_data *td, struct fio_file *f)
{
	struct mqblk_fio_file *mf = file_data(td, f);

	if (!mf)
		return 1;
	f->real_file_size = mqblk_get_capacity(mf->dev);
	fio_file_set_size_known(f);
	return 0;
}

static int fio_mqblk_open_file(struct thread_data *td, struct fio_file *f)
{
	struct mqblk_fio_file *mf = file_data(td, f);
	int rc;

	if (!mf)
		return 1;
	if (mf->q)
		return 0;
	rc = mqblk_queue_create(mf->dev, &mf->q);
	if (rc < 0) {
		log_err("mqblk: %s\n", mqblk_get_error_msg());
		td_verror(td, EINVAL, "mqblk_queue_create");
		return 1;
	}
	return 0;
}

static int fio_mqblk_close_file(struct thread_data *td, struct fio_file *f)
{
	struct mqblk_fio_file *mf = FILE_ENG_DATA(f);

	if (mf) {
		/* Waits for this queue's I/O in flight. */
		mqblk_queue_destroy(mf->q);
		free(mf);
		FILE_SET_ENG_DATA(f, NULL);
	}
	return 0;
}

static int fio_mqblk_init(struct thread_data *td)
{
	struct mqblk_fio_data *d = calloc(1, sizeof(*d));
	unsigned int depth = td->o.iodepth ? td->o.iodepth : 1;

	if (!d)
		return 1;
	d->depth = depth;
	d->comps = calloc(depth, sizeof(*d->comps));
	d->events = calloc(depth, sizeof(*d->events));
	d->queued = calloc(depth, sizeof(*d->queued));
	if (!d->comps || !d->events || !d->queued) {
		free(d->comps);
		free(d->events);
		free(d->queued);
		free(d);
		return 1;
	}
	td->io_ops_data = d;
	td->io_ops->flags |= FIO_ASYNCIO_SETS_ISSUE_TIME;
	td_set_ioengine_flags(td);
	return 0;
}

static void fio_mqblk_cleanup(struct thread_data *td)
{
	struct mqblk_fio_data *d = td->io_ops_data;

	if (!d)
		return;
	free(d->comps);
	free(d->events);
	free(d->queued);
	free(d);
	td->io_ops_data = NULL;
}

/* I/O buffers aligned for any device (fio offsets each io_u's buffer by a
 * multiple of the block size from here), so nothing is bounced. */
static int fio_mqblk_iomem_alloc(struct thread_data *td, size_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, size ? size : 1))
		return ENOMEM;
	td->orig_buffer = p;
	return 0;
}

static void fio_mqblk_iomem_free(struct thread_data *td)
{
	free(td->orig_buffer);
	td->orig_buffer = NULL;
}

static int errno_of(int code)
{
	switch (code) {
	case MQBLK_ERROR_RANGE:
	case MQBLK_ERROR_NO_SPACE:
		return ENOSPC;
	case MQBLK_ERROR_READ_ONLY:
		return EROFS;
	case MQBLK_ERROR_NOT_SUPPORTED:
		return EOPNOTSUPP;
	case MQBLK_ERROR_IO:
		return EIO;
	case MQBLK_ERROR_TIMEOUT:
		return ETIMEDOUT;
	case MQBLK_ERROR_NO_MEM:
		return ENOMEM;
	default:
		return EINVAL;
	}
}

static enum fio_q_status fio_mqblk_queue(struct thread_data *td, struct io_u *io_u)
{
	struct mqblk_fio_data *d = td->io_ops_data;
	struct mqblk_fio_file *mf = FILE_ENG_DATA(io_u->file);
	int rc;

	fio_ro_check(td, io_u);
	if (!mf || !mf->q) {
		io_u->error = EBADF;
		return FIO_Q_COMPLETED;
	}
	if (d->nr_queued >= d->depth)
		return FIO_Q_BUSY;

	switch (io_u->ddir) {
	case DDIR_READ:
		rc = mqblk_queue_read(mf->q, io_u->offset, io_u->xfer_buf, io_u->xfer_buflen, io_u, 0);
		break;
	case DDIR_WRITE:
		rc = mqblk_queue_write(mf->q, io_u->offset, io_u->xfer_buf, io_u->xfer_buflen, io_u, 0);
		break;
	case DDIR_TRIM:
		rc = mqblk_queue_discard(mf->q, io_u->offset, io_u->xfer_buflen, io_u, 0);
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
	case DDIR_SYNC_FILE_RANGE:
		rc = mqblk_queue_flush(mf->q, io_u, 0);
		break;
	default:
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	if (rc == MQBLK_ERROR_AGAIN)
		return FIO_Q_BUSY;
	if (rc < 0) {
		io_u->error = errno_of(rc);
		td_verror(td, io_u->error, mqblk_get_error_msg());
		return FIO_Q_COMPLETED;
	}
	mf->in_flight++;
	d->queued[d->nr_queued++] = io_u;
	return FIO_Q_QUEUED;
}

static int fio_mqblk_commit(struct thread_data *td)
{
	struct mqblk_fio_options *o = td->eo;
	struct mqblk_fio_data *d = td->io_ops_data;
	struct fio_file *f;
	unsigned int i;

	if (!d->nr_queued)
		return 0;
	/*
	 * fio commits each I/O (iodepth_batch=1). As the kernel's plug does for
	 * a submitter's batch, the queue's plug carries the committed requests
	 * until fio next waits for completions (getevents, which fio calls
	 * before it sleeps, thinks or quiesces) or the plug is full: the layer
	 * then dispatches a batch, not one request at a time.
	 */
	if (o && o->unplug) {
		for_each_file(td, f, i) {
			struct mqblk_fio_file *mf = FILE_ENG_DATA(f);

			if (mf && mf->q)
				mqblk_queue_commit(mf->q);
		}
	}
	if (fio_fill_issue_time(td)) {
		struct timespec now;

		fio_gettime(&now, NULL);
		for (i = 0; i < d->nr_queued; i++) {
			memcpy(&d->queued[i]->issue_time, &now, sizeof(now));
			io_u_queued(td, d->queued[i]);
		}
	}
	io_u_mark_submit(td, d->nr_queued);
	d->nr_queued = 0;
	return 0;
}

/* Collect up to `max` completions of one file's queue into events[got..]. */
static int reap(struct mqblk_fio_data *d, struct mqblk_fio_file *mf, unsigned int got,
		unsigned int min, unsigned int max)
{
	int n, i;

	n = mqblk_queue_do_io(mf->q, d->comps, (int)min, (int)(max - got));
	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		struct io_u *io_u = d->comps[i].user_data;

		if (d->comps[i].ret < 0) {
			io_u->error = d->comps[i].errno_value ? d->comps[i].errno_value : EIO;
			io_u->resid = io_u->xfer_buflen;
		} else {
			io_u->error = 0;
			io_u->resid = 0;
		}
		d->events[got + i] = io_u;
	}
	mf->in_flight -= (unsigned int)n;
	return n;
}

static int fio_mqblk_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			       const struct timespec fio_unused *t)
{
	struct mqblk_fio_data *d = td->io_ops_data;
	unsigned int got = 0, i = 0;
	struct fio_file *f;
	int n;

	if (max > d->depth)
		max = d->depth;
	/* Poll every file; then block on one with I/O in flight. */
	for (;;) {
		for_each_file(td, f, i) {
			struct mqblk_fio_file *mf = FILE_ENG_DATA(f);

			if (!mf || !mf->q || !mf->in_flight || got >= max)
				continue;
			n = reap(d, mf, got, 0, max);
			if (n < 0)
				return n;
			got += (unsigned int)n;
		}
		if (got >= min)
			return (int)got;
		for_each_file(td, f, i) {
			struct mqblk_fio_file *mf = FILE_ENG_DATA(f);

			if (!mf || !mf->q || !mf->in_flight)
				continue;
			n = reap(d, mf, got, 1, max);
			if (n <= 0)
				return n < 0 ? n : (int)got;
			got += (unsigned int)n;
			break;
		}
		if (got >= min)
			return (int)got;
		if (i >= td->o.nr_files)
			return (int)got; /* nothing in flight anywhere */
	}
}

static struct io_u *fio_mqblk_event(struct thread_data *td, int event)
{
	struct mqblk_fio_data *d = td->io_ops_data;

	return d->events[event];
}

struct ioengine_ops ioengine = {
	.name = "mqblk",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_NOEXTEND | FIO_MEMALIGN,
	.init = fio_mqblk_init,
	.cleanup = fio_mqblk_cleanup,
	.queue = fio_mqblk_queue,
	.commit = fio_mqblk_commit,
	.getevents = fio_mqblk_getevents,
	.event = fio_mqblk_event,
	.open_file = fio_mqblk_open_file,
	.close_file = fio_mqblk_close_file,
	.get_file_size = fio_mqblk_get_file_size,
	.iomem_alloc = fio_mqblk_iomem_alloc,
	.iomem_free = fio_mqblk_iomem_free,
	.options = options,
	.option_struct_size = sizeof(struct mqblk_fio_options),
};
