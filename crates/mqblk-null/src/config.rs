//! The null device's options (control plane): the part of a spec string
//! after `null,`, parsed into typed fields (Linux null_blk's module
//! parameters and configfs attributes).
//!
//! Options common to every device kind (`hw_queues`, `queue_depth`,
//! `queue_mode`, ...) are not parsed here: [`DeviceConfig::take_common`]
//! takes them. Whatever is left after both is an unknown option, and
//! [`SpecOptions::finish`] rejects it by name.
//!
//! [`DeviceConfig::take_common`]: mqblk_core::queue::DeviceConfig::take_common

use mqblk_core::error::{Error, Result};
use mqblk_core::limits::SECTOR_SIZE;
use mqblk_core::spec::{parse_size, SpecOptions};

use crate::bad_blocks::BadBlocks;
use crate::fault::FaultAttr;

/// Default capacity: 250 GiB, as null_blk's `gb=250`.
pub const DEFAULT_SIZE_BYTES: u64 = 250 << 30;
/// Default logical block size, as null_blk's `bs=512`.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;
/// Default delay of the timer completion mode, as null_blk's `completion_nsec`.
pub const DEFAULT_COMPLETION_NSEC: u64 = 10_000;
/// Default seed of the fault injectors.
pub const DEFAULT_SEED: u64 = 1;
/// Largest accepted `mbps`: 16 TiB/s, far above any real bandwidth, low
/// enough that bytes per millisecond fit comfortably in 64 bits.
pub const MAX_MBPS: u64 = 1 << 24;

/// When a request completes (Linux null_blk's `irqmode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompletionMode {
    /// Inside `queue_rq` (null_blk `irqmode=0`, "none").
    #[default]
    Inline,
    /// At the next `poll` of the hardware queue, all at once (null_blk
    /// `irqmode=1`, softirq).
    Deferred,
    /// At the first `poll` after `completion_nsec` has passed (null_blk
    /// `irqmode=2`, hrtimer).
    Timer,
}

impl CompletionMode {
    /// Parse `inline`, `deferred` or `timer`.
    pub fn parse(s: &str) -> Option<CompletionMode> {
        match s {
            "inline" => Some(CompletionMode::Inline),
            "deferred" => Some(CompletionMode::Deferred),
            "timer" => Some(CompletionMode::Timer),
            _ => None,
        }
    }

    /// The name used in spec strings.
    pub fn name(self) -> &'static str {
        match self {
            CompletionMode::Inline => "inline",
            CompletionMode::Deferred => "deferred",
            CompletionMode::Timer => "timer",
        }
    }
}

impl std::fmt::Display for CompletionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every null-device option, typed. `Default` gives null_blk's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NullConfig {
    /// Capacity in bytes (`size`, default 250 GiB). A multiple of
    /// `block_size`.
    pub size_bytes: u64,
    /// Logical block size in bytes (`block_size`, 512 to 4096, a power of
    /// two; default 512).
    pub block_size: u32,
    /// When requests complete (`completion`, default inline).
    pub completion: CompletionMode,
    /// Delay of the timer mode in nanoseconds (`completion_nsec`, default
    /// 10000). Refused with the other modes, where it would do nothing.
    pub completion_nsec: u64,
    /// Keep written data and return it on reads (`memory_backed`, default
    /// off: data is never touched).
    pub memory_backed: bool,
    /// Complete requests with an I/O error (`error_interval`,
    /// `error_probability`).
    pub error: FaultAttr,
    /// Keep requests and never complete them, until the core's timeout
    /// handler asks (`timeout_interval`, `timeout_probability`).
    pub timeout: FaultAttr,
    /// Answer `queue_rq` with busy, so the core requeues (`requeue_interval`,
    /// `requeue_probability`).
    pub requeue: FaultAttr,
    /// Seed of the per-hardware-queue fault generators (`seed`, default 1).
    pub seed: u64,
    /// Sector ranges whose reads and writes fail with a medium error
    /// (`bad_blocks=START-END[:START-END...]`, inclusive, in 512-byte
    /// sectors; default none).
    pub bad_blocks: BadBlocks,
    /// Bandwidth limit of the whole device in MiB/s (`mbps`, default 0:
    /// unlimited).
    pub mbps: u64,
    /// Size of the volatile write cache in bytes (`cache_size`, default 0:
    /// no cache, every write is durable when it completes). A multiple of
    /// `block_size`, and only with `memory_backed=1`. With a cache the
    /// device declares `write_cache`: writes stay volatile until a flush, a
    /// FUA write or an eviction writes them back, and
    /// [`crate::NullHandle::power_cut`] drops them (null_blk's `cache_size`).
    pub cache_size_bytes: u64,
    /// Declare native FUA when the write cache is on (`fua`, default 1, as
    /// null_blk's `blk_queue_write_cache(q, true, true)`). With `fua=0` the
    /// core emulates a FUA write as the write followed by a flush, and the
    /// driver ignores a FUA flag that reaches it anyway. Refused without a
    /// cache, where it would do nothing.
    pub fua: bool,
}

impl Default for NullConfig {
    fn default() -> Self {
        NullConfig {
            size_bytes: DEFAULT_SIZE_BYTES,
            block_size: DEFAULT_BLOCK_SIZE,
            completion: CompletionMode::Inline,
            completion_nsec: DEFAULT_COMPLETION_NSEC,
            memory_backed: false,
            error: FaultAttr::OFF,
            timeout: FaultAttr::OFF,
            requeue: FaultAttr::OFF,
            seed: DEFAULT_SEED,
            bad_blocks: BadBlocks::default(),
            mbps: 0,
            cache_size_bytes: 0,
            fua: true,
        }
    }
}

impl NullConfig {
    /// Take the null device's options out of `o`, validating each one.
    ///
    /// The common options and unknown keys are left in `o`: call
    /// [`mqblk_core::queue::DeviceConfig::take_common`] and then
    /// [`SpecOptions::finish`] (as [`crate::open`] does).
    pub fn from_options(o: &mut SpecOptions) -> Result<NullConfig> {
        let mut c = NullConfig::default();
        let mut size_raw = None;
        if let Some(raw) = o.take_str("size") {
            c.size_bytes = match parse_size(&raw) {
                Ok(n) if n > 0 => n,
                Ok(_) => return Err(o.error("size", &raw, "a non-zero size such as 1G")),
                Err(why) => {
                    return Err(o.error("size", &raw, &format!("a size such as 4k or 1G ({why})")))
                }
            };
            size_raw = Some(raw);
        }
        if let Some(raw) = o.take_str("block_size") {
            c.block_size = parse_size(&raw)
                .ok()
                .filter(|&n| (512..=4096).contains(&n) && n.is_power_of_two())
                .ok_or_else(|| o.error("block_size", &raw, "512, 1k, 2k or 4k"))?
                as u32;
        }
        if !c.size_bytes.is_multiple_of(u64::from(c.block_size)) {
            let raw = size_raw.unwrap_or_else(|| c.size_bytes.to_string());
            let expected = format!(
                "a non-zero multiple of the block size of {} bytes",
                c.block_size
            );
            return Err(o.error("size", &raw, &expected));
        }
        if let Some(raw) = o.take_str("completion") {
            c.completion = CompletionMode::parse(&raw)
                .ok_or_else(|| o.error("completion", &raw, "inline, deferred or timer"))?;
        }
        if let Some(ns) = o.take_u64("completion_nsec")? {
            if c.completion != CompletionMode::Timer {
                return Err(does_nothing(
                    o,
                    &format!("completion_nsec={ns}"),
                    &format!("completion={}", c.completion),
                    "it is the delay of completion=timer: add completion=timer, or drop completion_nsec",
                ));
            }
            c.completion_nsec = ns;
        }
        if let Some(b) = o.take_bool("memory_backed")? {
            c.memory_backed = b;
        }
        c.error = take_fault(o, "error_interval", "error_probability")?;
        c.timeout = take_fault(o, "timeout_interval", "timeout_probability")?;
        c.requeue = take_fault(o, "requeue_interval", "requeue_probability")?;
        if let Some(seed) = o.take_u64("seed")? {
            c.seed = seed;
        }
        if let Some(raw) = o.take_str("bad_blocks") {
            let capacity_sectors = c.size_bytes / SECTOR_SIZE;
            c.bad_blocks = BadBlocks::parse(&raw, capacity_sectors).map_err(|why| {
                o.error(
                    "bad_blocks",
                    &raw,
                    &format!("START-END[:START-END...] in sectors, inclusive ({why})"),
                )
            })?;
        }
        if let Some(mbps) = o.take_u64("mbps")? {
            if mbps > MAX_MBPS {
                return Err(o.error("mbps", &mbps.to_string(), "0 (unlimited) to 16777216 MiB/s"));
            }
            c.mbps = mbps;
        }
        if let Some(raw) = o.take_str("cache_size") {
            let n = parse_size(&raw).map_err(|why| {
                o.error(
                    "cache_size",
                    &raw,
                    &format!("a size such as 64k or 1M, or 0 for no cache ({why})"),
                )
            })?;
            if n > 0 && !c.memory_backed {
                return Err(o.error(
                    "cache_size",
                    &raw,
                    "0 unless memory_backed=1 (the write cache holds data, so the device \
                     must keep data: add memory_backed=1 or drop cache_size)",
                ));
            }
            if !n.is_multiple_of(u64::from(c.block_size)) {
                let expected = format!(
                    "a multiple of the block size of {} bytes (block_size): the cache \
                     holds whole blocks",
                    c.block_size
                );
                return Err(o.error("cache_size", &raw, &expected));
            }
            c.cache_size_bytes = n;
        }
        if let Some(b) = o.take_bool("fua")? {
            if !c.has_write_cache() {
                return Err(does_nothing(
                    o,
                    &format!("fua={}", u8::from(b)),
                    "no write cache",
                    "it says how the cache takes FUA writes: add memory_backed=1,cache_size=SIZE, or drop fua",
                ));
            }
            c.fua = b;
        }
        Ok(c)
    }

    /// True if the device has a volatile write cache (`cache_size > 0`).
    pub fn has_write_cache(&self) -> bool {
        self.cache_size_bytes > 0
    }

    /// True if any fault injector can fire.
    pub fn faults_enabled(&self) -> bool {
        self.error.is_enabled() || self.timeout.is_enabled() || self.requeue.is_enabled()
    }
}

/// A key given where it does nothing: refused, as an unknown key is, so
/// that a run never quietly differs from what its spec says.
fn does_nothing(o: &SpecOptions, option: &str, mode: &str, why: &str) -> Error {
    Error::spec(
        o.spec(),
        format!("option {option} does nothing with {mode}; {why}"),
    )
}

/// Take one fault_attr pair: an interval (any u32) and a probability in
/// percent (0 to 100). An interval alone fails every Nth request
/// (probability 100), as a null_blk user means by it; a probability alone
/// rolls on every request.
fn take_fault(o: &mut SpecOptions, interval_key: &str, probability_key: &str) -> Result<FaultAttr> {
    let mut attr = FaultAttr::OFF;
    let mut interval_given = false;
    if let Some(n) = o.take_u64(interval_key)? {
        attr.interval = u32::try_from(n).map_err(|_| {
            o.error(
                interval_key,
                &n.to_string(),
                "0 to 4294967295 (0 or 1: every request)",
            )
        })?;
        interval_given = true;
    }
    if let Some(p) = o.take_u64(probability_key)? {
        if p > 100 {
            return Err(o.error(
                probability_key,
                &p.to_string(),
                "a percentage from 0 to 100",
            ));
        }
        attr.probability = p as u8;
    } else if interval_given {
        attr.probability = 100;
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use mqblk_core::spec;

    use super::*;

    fn opts(s: &str) -> SpecOptions {
        spec::parse(s).expect("spec parses").options
    }

    fn parse(s: &str) -> Result<NullConfig> {
        let mut o = opts(s);
        let c = NullConfig::from_options(&mut o)?;
        o.finish()?;
        Ok(c)
    }

    /// The error names the key (and so the caller knows what to fix).
    fn assert_spec_error(s: &str, key: &str) {
        match parse(s) {
            Err(e @ Error::Spec { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&format!("{key}=")), "{s}: {msg}");
            }
            other => panic!("{s}: expected a spec error naming {key}, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_null_blk_defaults() {
        let c = parse("null").unwrap();
        assert_eq!(c, NullConfig::default());
        assert_eq!(c.size_bytes, 250 << 30);
        assert_eq!(c.block_size, 512);
        assert_eq!(c.completion, CompletionMode::Inline);
        assert_eq!(c.completion_nsec, 10_000);
        assert!(!c.memory_backed);
        assert!(!c.faults_enabled());
        assert_eq!(c.seed, 1);
        assert!(c.bad_blocks.is_empty());
        assert_eq!(c.mbps, 0);
        assert_eq!(c.cache_size_bytes, 0);
        assert!(!c.has_write_cache());
        assert!(c.fua, "null_blk declares FUA with its cache");
    }

    #[test]
    fn each_option_is_parsed() {
        let c = parse(
            "null,size=1G,block_size=4k,completion=timer,completion_nsec=2500,memory_backed=1,\
             error_interval=3,error_probability=50,timeout_interval=7,timeout_probability=1,\
             requeue_interval=0,requeue_probability=100,seed=42,bad_blocks=8-15:100-100,mbps=200,\
             cache_size=64k,fua=0",
        )
        .unwrap();
        assert_eq!(c.size_bytes, 1 << 30);
        assert_eq!(c.block_size, 4096);
        assert_eq!(c.completion, CompletionMode::Timer);
        assert_eq!(c.completion_nsec, 2500);
        assert!(c.memory_backed);
        assert_eq!(
            c.error,
            FaultAttr {
                interval: 3,
                probability: 50
            }
        );
        assert_eq!(
            c.timeout,
            FaultAttr {
                interval: 7,
                probability: 1
            }
        );
        assert_eq!(
            c.requeue,
            FaultAttr {
                interval: 0,
                probability: 100
            }
        );
        assert!(c.faults_enabled());
        assert_eq!(c.seed, 42);
        assert!(c.bad_blocks.hits(15, 1));
        assert!(c.bad_blocks.hits(100, 1));
        assert!(!c.bad_blocks.hits(16, 84));
        assert_eq!(c.mbps, 200);
        assert_eq!(c.cache_size_bytes, 64 << 10);
        assert!(c.has_write_cache());
        assert!(!c.fua);
        let c = parse("null,memory_backed=1,cache_size=1M").unwrap();
        assert!(
            c.has_write_cache() && c.fua,
            "fua defaults to 1 with a cache"
        );
        assert!(!parse("null,cache_size=0").unwrap().has_write_cache());

        for (s, mode) in [
            ("null,completion=inline", CompletionMode::Inline),
            ("null,completion=deferred", CompletionMode::Deferred),
            ("null,completion=timer", CompletionMode::Timer),
        ] {
            assert_eq!(parse(s).unwrap().completion, mode);
            assert_eq!(CompletionMode::parse(mode.name()), Some(mode));
        }
        for bs in ["512", "1k", "2048", "4096"] {
            parse(&format!("null,block_size={bs}")).unwrap();
        }
        assert!(
            parse("null,memory_backed").unwrap().memory_backed,
            "a bare key is a switch"
        );
    }

    #[test]
    fn bad_values_are_typed_errors_naming_the_key() {
        for (s, key) in [
            ("null,size=12q", "size"),
            ("null,size=0", "size"),
            ("null,size=1000", "size"),
            ("null,block_size=4k,size=6k", "size"),
            ("null,block_size=256", "block_size"),
            ("null,block_size=8k", "block_size"),
            ("null,block_size=1536", "block_size"),
            ("null,block_size=big", "block_size"),
            ("null,completion=softirq", "completion"),
            ("null,completion_nsec=-1", "completion_nsec"),
            ("null,memory_backed=maybe", "memory_backed"),
            ("null,error_probability=101", "error_probability"),
            ("null,timeout_probability=x", "timeout_probability"),
            ("null,requeue_interval=4294967296", "requeue_interval"),
            ("null,seed=abc", "seed"),
            ("null,bad_blocks=9-3", "bad_blocks"),
            ("null,bad_blocks=1-2:x", "bad_blocks"),
            ("null,size=1M,bad_blocks=0-2048", "bad_blocks"),
            ("null,mbps=99999999999", "mbps"),
            ("null,memory_backed=1,cache_size=lots", "cache_size"),
            (
                "null,memory_backed=1,block_size=4k,cache_size=6k",
                "cache_size",
            ),
            ("null,memory_backed=1,cache_size=1M,fua=maybe", "fua"),
        ] {
            assert_spec_error(s, key);
        }
    }

    #[test]
    fn a_cache_needs_memory_and_the_error_names_both_options() {
        for s in ["null,cache_size=1M", "null,cache_size=1M,memory_backed=0"] {
            let msg = match parse(s) {
                Err(e @ Error::Spec { .. }) => e.to_string(),
                other => panic!("{s}: expected a spec error, got {other:?}"),
            };
            assert!(msg.contains("cache_size="), "{msg}");
            assert!(msg.contains("memory_backed=1"), "{msg}");
        }
        // The order of the options does not matter.
        assert!(parse("null,cache_size=1M,memory_backed=1")
            .unwrap()
            .has_write_cache());
        let msg = parse("null,memory_backed=1,block_size=4k,cache_size=6k")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("block_size"), "{msg}");
    }

    #[test]
    fn an_interval_alone_fails_every_nth_request() {
        for key in ["error", "timeout", "requeue"] {
            let c = parse(&format!("null,{key}_interval=10")).unwrap();
            let attr = [c.error, c.timeout, c.requeue];
            assert!(attr.iter().filter(|a| a.is_enabled()).count() == 1);
            assert!(attr.contains(&FaultAttr {
                interval: 10,
                probability: 100
            }));
        }
        // Every 10th request, and no other.
        let c = parse("null,error_interval=10").unwrap();
        let mut f = crate::fault::FaultState::new(c.error);
        let mut rng = crate::fault::FaultRng::new(1, 0);
        let failed: Vec<u32> = (1..=40).filter(|_| f.should_fail(&mut rng)).collect();
        assert_eq!(failed.len(), 4);
        // A probability given with it still counts.
        assert_eq!(
            parse("null,error_interval=10,error_probability=0")
                .unwrap()
                .error
                .probability,
            0
        );
    }

    #[test]
    fn a_key_that_does_nothing_in_its_mode_is_refused_naming_both() {
        for (s, want) in [
            (
                "null,completion_nsec=5000",
                "option completion_nsec=5000 does nothing with completion=inline",
            ),
            (
                "null,completion=deferred,completion_nsec=5000",
                "option completion_nsec=5000 does nothing with completion=deferred",
            ),
            (
                "null,fua=0",
                "option fua=0 does nothing with no write cache",
            ),
        ] {
            let msg = match parse(s) {
                Err(e @ Error::Spec { .. }) => e.to_string(),
                other => panic!("{s}: expected a spec error, got {other:?}"),
            };
            assert!(msg.contains(want), "{msg}");
        }
        // Where they do something, they are taken.
        assert_eq!(
            parse("null,completion=timer,completion_nsec=5000")
                .unwrap()
                .completion_nsec,
            5000
        );
        assert!(
            !parse("null,memory_backed=1,cache_size=4k,fua=0")
                .unwrap()
                .fua
        );
    }

    #[test]
    fn unknown_and_common_keys_are_left_for_the_caller() {
        let mut o = opts("null,size=1G,queue_depth=8,sise=2G");
        NullConfig::from_options(&mut o).unwrap();
        assert_eq!(o.take_u64("queue_depth").unwrap(), Some(8));
        let e = o.finish().unwrap_err();
        assert!(matches!(e, Error::Spec { .. }));
        assert!(e.to_string().contains("unknown option `sise`"), "{e}");
    }
}
