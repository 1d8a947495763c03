//! fio's `zonemode=` and its sizes (`zonesize=`, `zonerange=`,
//! `zoneskip=`, `max_open_zones=`, `read_beyond_wp=`), as a job names
//! them; mqblk-bench's `zone` moves the job's I/O by them.

/// Most zones a `zbd` job emulates (a write pointer each).
pub const ZBD_ZONES_MAX: u64 = 1 << 22;

/// The zone size a `zbd` job takes on a device without zones when the job
/// gives none (fio requires `zonesize=` there; mqblk says it used this).
pub const ZBD_DEFAULT_ZONE_BYTES: u64 = 256 << 20;

/// `zonemode=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ZoneMode {
    /// No zones (fio's `none`), unless `zonesize=` is given.
    #[default]
    None,
    /// `strided`.
    Strided,
    /// `zbd`.
    Zbd,
}

impl ZoneMode {
    /// fio's names.
    pub fn parse(s: &str) -> Option<ZoneMode> {
        Some(match s {
            "none" => ZoneMode::None,
            "strided" => ZoneMode::Strided,
            "zbd" => ZoneMode::Zbd,
            _ => return None,
        })
    }
}

/// A job's zone settings, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ZoneSpec {
    /// `zonemode=` (a `zonesize=` alone means strided, as in fio).
    pub mode: ZoneMode,
    /// `zonesize=`.
    pub size: u64,
    /// `zonerange=` (default `zonesize`).
    pub range: u64,
    /// `zoneskip=`.
    pub skip: u64,
    /// `max_open_zones=` (0: no limit).
    pub max_open: u32,
    /// `read_beyond_wp=`.
    pub read_beyond_wp: bool,
}

impl ZoneSpec {
    /// The mode in effect: a bare `zonesize=` is strided.
    pub fn effective(&self) -> ZoneMode {
        match self.mode {
            ZoneMode::None if self.size > 0 => ZoneMode::Strided,
            m => m,
        }
    }
}
