//! The lower ranges a table maps onto, checked as each line is built: no
//! two upper ranges may land on one lower range. Two stripes on the same
//! leg at the same offset, or two lines over the same sectors of one
//! device, would make writes to one block overwrite another, silently.
//!
//! A range is recorded on the device that holds the data: a remapped
//! window (a partition, a one-line linear table) counts as its lower
//! device's sectors from the window's start. The same spec twice is one
//! leg ([`crate::legs`]), so `ram,size=64M` named twice is one device.

use mqblk_core::Device;

pub use crate::overlap::Overlap;
use crate::table::TableError;

/// For a memory device named twice: the same spec twice is one device,
/// and `instance=` makes a second one (a second open of a file or an export
/// would be the same data under another name, so no hint for those).
fn two_devices_hint(spec: &str) -> String {
    let kind = spec.split([',', ':']).next().unwrap_or("");
    if matches!(kind, "ram" | "null" | "nullb") {
        format!(
            "; the same spec twice is one device: for two, tell them apart with `instance=`, as in `{spec},instance=b`"
        )
    } else {
        String::new()
    }
}

/// What a line does with the lower range it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Every data I/O of the line's range lands there (linear, striped,
    /// mirror legs, flakey).
    All,
    /// Only one class of operations lands there (`delay`'s read and write
    /// devices): the other class of the same line may name exactly the
    /// same range, since each upper block still has one lower block.
    Only(&'static str),
    /// No data lands there (`delay`'s flush device): nothing to check.
    NoData,
}

/// One lower range a line maps onto.
#[derive(Debug)]
struct Claim {
    /// The device that holds the data (a window's lower device).
    device: Device,
    line: usize,
    field: usize,
    what: String,
    use_: Use,
    /// On `device`, in sectors.
    start: u64,
    end: u64,
}

/// Every lower range claimed so far while a table is built.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    claims: Vec<Claim>,
}

impl Claims {
    /// Record that field `field` of line `line` (`what` in errors: "stripe
    /// 1", "leg 0", "device") maps `sectors` of `dev` (named `spec`), and
    /// refuse it if an earlier claim overlaps it.
    pub(crate) fn claim(
        &mut self,
        dev: &Device,
        spec: &str,
        (line, field): (usize, usize),
        what: &str,
        use_: Use,
        sectors: std::ops::Range<u64>,
    ) -> Result<(), TableError> {
        if use_ == Use::NoData {
            return Ok(());
        }
        let (device, base) = match dev.remapped_from() {
            Some((lower, start_bytes)) => (lower, start_bytes >> 9),
            None => (dev.clone(), 0),
        };
        let (start, end) = (base + sectors.start, base + sectors.end);
        for c in &self.claims {
            if !c.device.same(&device) || c.end <= start || end <= c.start {
                continue;
            }
            let same_range_other_ops = c.line == line
                && c.start == start
                && c.end == end
                && matches!((c.use_, use_), (Use::Only(a), Use::Only(b)) if a != b);
            if same_range_other_ops {
                continue;
            }
            let (lo, hi) = (c.start.max(start), c.end.min(end));
            let first = if c.line == line {
                format!("{} (field {})", c.what, c.field)
            } else {
                format!("line {}'s {} (field {})", c.line, c.what, c.field)
            };
            let reason = format!(
                "{what} `{spec}` sectors {}..{} overlap {first} on the same device: its sectors {lo}..{hi} would hold two different ranges of this table, so writes to one would overwrite the other; give each line and leg its own sectors{}",
                start - base,
                end - base,
                two_devices_hint(spec),
            );
            let mut e = TableError::new(line, field, "device", reason);
            e.overlap = Some(Box::new(Overlap {
                spec: spec.to_string(),
                first: (c.line, c.field),
                second: (line, field),
                sectors: (lo - base)..(hi - base),
            }));
            return Err(e);
        }
        self.claims.push(Claim {
            device,
            line,
            field,
            what: what.to_string(),
            use_,
            start,
            end,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ram(spec: &str) -> Device {
        let s = mqblk_core::spec::parse(spec).unwrap();
        mqblk_ram::open(s.options).unwrap()
    }

    #[test]
    fn an_overlap_names_both_claims_and_the_shared_sectors_on_the_window_s_device() {
        let disk = ram("ram,size=64k");
        // A window from sector 16: its sectors 0..32 are the disk's 16..48.
        let window = disk.remap(16 << 9, 64 << 9, "w", false, None).unwrap();
        let mut c = Claims::default();
        c.claim(&disk, "disk", (1, 4), "device", Use::All, 0..24)
            .unwrap();
        let e = c
            .claim(&window, "window", (3, 6), "stripe 1", Use::All, 0..32)
            .unwrap_err();
        assert_eq!((e.line, e.field), (3, 6));
        assert_eq!(
            e.overlap.as_deref(),
            Some(&Overlap {
                spec: "window".into(),
                first: (1, 4),
                second: (3, 6),
                sectors: 0..8,
            })
        );
        // Past the first claim, and on another device: no overlap.
        c.claim(&window, "window", (3, 6), "stripe 1", Use::All, 8..16)
            .unwrap();
        let other = ram("ram,size=64k");
        c.claim(&other, "other", (4, 4), "device", Use::All, 0..128)
            .unwrap();
    }

    #[test]
    fn reads_and_writes_of_one_line_may_share_a_range_exactly() {
        let disk = ram("ram,size=64k");
        let mut c = Claims::default();
        c.claim(&disk, "d", (1, 4), "read device", Use::Only("reads"), 0..8)
            .unwrap();
        c.claim(
            &disk,
            "d",
            (1, 7),
            "write device",
            Use::Only("writes"),
            0..8,
        )
        .unwrap();
        c.claim(&disk, "d", (1, 10), "flush device", Use::NoData, 0..8)
            .unwrap();
        // Another line on the same range, or a shifted one: refused.
        assert!(c
            .claim(&disk, "d", (2, 4), "read device", Use::Only("reads"), 0..8)
            .is_err());
        let mut c = Claims::default();
        c.claim(&disk, "d", (1, 4), "read device", Use::Only("reads"), 0..8)
            .unwrap();
        assert!(c
            .claim(
                &disk,
                "d",
                (1, 7),
                "write device",
                Use::Only("writes"),
                4..12
            )
            .is_err());
    }
}
