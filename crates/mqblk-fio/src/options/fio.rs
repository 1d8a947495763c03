//! What of fio's options mqblk bench takes without a key of its own: the
//! keys it accepts and ignores (each with the note a job file is given),
//! fio's I/O engines, and what a refused fio option is told.

/// fio keys that are accepted and do not change what mqblk runs, each with
/// the note printed when a job file uses it: reporting choices, other
/// engines' options, process placement, and file-set options (mqblk runs
/// each job on its device).
pub const NOTED_KEYS: &[(&str, &str)] = &[
    ("description", "a comment"),
    (
        "gtod_reduce",
        "mqblk reads no clock per I/O unless a latency log or slat_percentiles asks",
    ),
    (
        "clat_percentiles",
        "mqblk always reports fio's default percentiles",
    ),
    (
        "lat_percentiles",
        "mqblk always reports fio's default percentiles",
    ),
    ("percentile_list", "mqblk reports fio's default percentiles"),
    ("disable_lat", "latency comes from the layer's histograms"),
    ("disable_clat", "latency comes from the layer's histograms"),
    (
        "disable_slat",
        "slat is measured only when write_lat_log or slat_percentiles asks",
    ),
    ("disable_bw_measurement", "bandwidth is always reported"),
    ("kb_base", "reports use fio's default units"),
    ("unit_base", "reports use fio's default units"),
    ("thread", "jobs are always threads"),
    ("threads", "jobs are always threads"),
    ("cpus_allowed", "no CPU pinning"),
    ("cpus_allowed_policy", "no CPU pinning"),
    ("cpumask", "no CPU pinning"),
    ("numa_cpu_nodes", "no NUMA placement"),
    ("numa_mem_policy", "no NUMA placement"),
    ("nice", "no scheduling priority"),
    ("cmdprio", "another engine's option"),
    ("cmdprio_class", "another engine's option"),
    ("cmdprio_percentage", "another engine's option"),
    ("cmdprio_bssplit", "another engine's option"),
    (
        "sqthread_poll",
        "another engine's option (file: devices take sqpoll= in their spec)",
    ),
    ("sqthread_poll_cpu", "another engine's option"),
    (
        "registerfiles",
        "another engine's option (file: devices register their files)",
    ),
    (
        "fixedbufs",
        "another engine's option (file: devices register their buffers)",
    ),
    (
        "hipri",
        "another engine's option (file: devices take iopoll= in their spec)",
    ),
    ("nonvectored", "another engine's option"),
    ("userspace_reap", "another engine's option"),
    (
        "iodepth_batch",
        "mqblk batches submissions through its plug",
    ),
    (
        "iodepth_batch_submit",
        "mqblk batches submissions through its plug",
    ),
    (
        "iodepth_batch_complete",
        "mqblk reaps every completion ready",
    ),
    (
        "iodepth_batch_complete_min",
        "mqblk reaps every completion ready",
    ),
    (
        "iodepth_batch_complete_max",
        "mqblk reaps every completion ready",
    ),
    ("iodepth_low", "mqblk keeps the queue full"),
    (
        "io_submit_mode",
        "mqblk submits inline, batched by its plug",
    ),
    ("mem", "buffers come from the device's aligned pool"),
    ("iomem", "buffers come from the device's aligned pool"),
    ("mem_align", "buffers come from the device's aligned pool"),
    ("iomem_align", "buffers come from the device's aligned pool"),
    ("invalidate", "mqblk has no page cache of its own to drop"),
    ("create_serialize", "mqblk opens one device per job section"),
    ("create_on_open", "mqblk opens one device per job section"),
    ("create_fsync", "mqblk opens one device per job section"),
    (
        "allow_file_create",
        "mqblk opens one device per job section",
    ),
    ("fallocate", "mqblk opens one device per job section"),
    ("unlink", "mqblk deletes no files"),
    (
        "directory",
        "mqblk runs on the device of --device (or filename=), not on files in a directory",
    ),
    ("nrfiles", "mqblk runs on one device per job"),
    ("nr_files", "mqblk runs on one device per job"),
    ("openfiles", "mqblk runs on one device per job"),
    ("filename_format", "mqblk runs on one device per job"),
    ("file_service_type", "mqblk runs on one device per job"),
    ("scramble_buffers", "write data is random already"),
    ("refill_buffers", "write data is random already"),
    ("buffer_pattern", "write data is mqblk's own"),
    (
        "ignore_error",
        "mqblk goes on past the errors continue_on_error= names, whatever their errno",
    ),
    ("error_dump", "the first error is reported"),
    ("verify_dump", "mismatches are reported"),
    ("verify_async", "verification runs in the job thread"),
    (
        "serialize_overlap",
        "a verify job never has two I/Os on one block in flight; other jobs do not care",
    ),
    (
        "zone_reset_threshold",
        "emulated zones are reset when a full one is written",
    ),
    (
        "zone_reset_frequency",
        "emulated zones are reset when a full one is written",
    ),
    ("fsync_on_close", "end_fsync= flushes the device"),
    ("verify_async_cpus", "verification runs in the job thread"),
    (
        "verify_state_save",
        "the verify state lives in memory for the run",
    ),
    (
        "verify_state_load",
        "the verify state lives in memory for the run",
    ),
];

/// What a job file is told of a value mqblk takes in place of fio's:
/// another checksum for `verify=`, the generator behind `random_generator=`.
pub fn value_note(key: &str, value: &str) -> Option<String> {
    if key == "random_generator" {
        let g = crate::random_generator::RandomGenerator::parse(value)?;
        return Some(g.note().to_string());
    }
    if key != "verify" {
        return None;
    }
    let v = value.trim();
    let used = verify_stand_in(v).filter(|u| *u != v && v != "crc32c-intel")?;
    Some(format!(
        "checked with {used} (mqblk writes fio's headers for md5, sha1, sha256, sha3-*, \
         xxhash and the crcs only; \
         each catches the same corruption, but fio with verify={v} cannot check this run's \
         blocks, nor mqblk blocks fio wrote with it)"
    ))
}

/// The checksum mqblk verifies with for fio's `verify=NAME`: fio's meta
/// is checked with crc32c, sha512 with sha256 (fio 3.33's sha512 is not
/// SHA-512); `null` (fio's "only pretend") is no verify.
pub fn verify_stand_in(name: &str) -> Option<&'static str> {
    Some(match name {
        "meta" => "crc32c",
        "sha512" => "sha256",
        "null" => "none",
        _ => return None,
    })
}

/// The note for a fio key that is accepted without effect, if it is one.
pub fn noted(key: &str) -> Option<&'static str> {
    NOTED_KEYS.iter().find(|(k, _)| *k == key).map(|(_, n)| *n)
}

/// What a refused fio key is told: mqblk bench does not model it, and
/// fio with mqblk's fio engine runs it.
pub const FIO_ENGINE_HINT: &str = "if it is a fio option, it changes the workload in a way \
     mqblk bench does not model: run the job file with fio through mqblk's fio engine \
     (contrib/fio-engine: fio --ioengine=external:libmqblk-fio.so --mqblk_spec=SPEC JOBFILE)";

/// What a job is told of fio's `ioengine=NAME` that mqblk takes the place
/// of without a choice to make (libaio, posixaio), in a job file and on
/// the command line alike.
pub const ASYNC_ENGINE_NOTE: &str = "mqblk is the engine (file devices use io_uring)";

/// A file device's `engine=` for fio's `ioengine=NAME`: `Ok(Some)` for
/// io_uring and the pread/pwrite family, `Ok(None)` for fio's other async
/// engines (libaio, posixaio: the file device's default engine, io_uring,
/// takes their place), and an explanation for the rest.
pub fn file_engine(name: &str) -> Result<Option<&'static str>, String> {
    match name.trim() {
        "io_uring" | "uring" => Ok(Some("uring")),
        "psync" | "sync" | "pvsync" | "pvsync2" => Ok(Some("psync")),
        "libaio" | "posixaio" => Ok(None),
        "null" => Err(
            "fio's null engine is mqblk's null device: --device null (device=null in a job file)"
                .into(),
        ),
        _ => Err(
            "mqblk is itself the I/O engine; file devices take io_uring or psync \
                  (engine=uring|psync in a file: spec), and the device is chosen with \
                  --device SPEC (device= in a job file)"
                .into(),
        ),
    }
}
