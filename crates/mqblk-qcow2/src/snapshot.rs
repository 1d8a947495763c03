//! Internal snapshots (the snapshot table): listed, and their clusters
//! kept. A snapshot's L1 table and clusters are counted in the refcounts,
//! so the active image, which writes only clusters whose refcount is 1
//! (the COPIED bit), never changes them. Pure: parses a byte slice.

/// One snapshot table entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Unique id (`1`, `2`, ...).
    pub id: String,
    /// Name.
    pub name: String,
    /// File offset of its L1 table.
    pub l1_table_offset: u64,
    /// Entries of its L1 table.
    pub l1_size: u32,
    /// When it was taken (seconds since the epoch).
    pub date_sec: u32,
    /// Guest clock when it was taken, in nanoseconds.
    pub vm_clock_nsec: u64,
    /// Bytes of saved VM state.
    pub vm_state_size: u64,
    /// Guest size when it was taken, if recorded.
    pub disk_size: Option<u64>,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parse `n` entries from `b` (the table, read from `snapshots_offset`).
/// Returns them and the table's length in bytes. `Err` says which entry
/// runs past the bytes given.
pub fn parse(b: &[u8], n: u32) -> Result<(Vec<Snapshot>, u64), String> {
    let mut out = Vec::with_capacity(n.min(1024) as usize);
    let mut at = 0usize;
    for i in 0..n {
        let short = || {
            format!(
                "snapshot entry {i} at table byte {at} runs past the {} bytes read",
                b.len()
            )
        };
        if at + 40 > b.len() {
            return Err(short());
        }
        let id_len = be16(b, at + 12) as usize;
        let name_len = be16(b, at + 14) as usize;
        let extra = be32(b, at + 36) as usize;
        let end = at + 40 + extra + id_len + name_len;
        if end > b.len() {
            return Err(short());
        }
        let e = at + 40;
        let vm_state_large = (extra >= 8).then(|| be64(b, e));
        let disk_size = (extra >= 16).then(|| be64(b, e + 8));
        let id = &b[e + extra..e + extra + id_len];
        let name = &b[e + extra + id_len..end];
        out.push(Snapshot {
            id: String::from_utf8_lossy(id).into_owned(),
            name: String::from_utf8_lossy(name).into_owned(),
            l1_table_offset: be64(b, at),
            l1_size: be32(b, at + 8),
            date_sec: be32(b, at + 16),
            vm_clock_nsec: be64(b, at + 24),
            vm_state_size: vm_state_large.unwrap_or(u64::from(be32(b, at + 32))),
            disk_size,
        });
        at = end.next_multiple_of(8);
    }
    Ok((out, at as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_parses_and_a_short_one_is_refused() {
        let mut b = vec![0u8; 40];
        b[0..8].copy_from_slice(&0x50000u64.to_be_bytes());
        b[8..12].copy_from_slice(&2u32.to_be_bytes());
        b[12..14].copy_from_slice(&1u16.to_be_bytes());
        b[14..16].copy_from_slice(&4u16.to_be_bytes());
        b[36..40].copy_from_slice(&16u32.to_be_bytes());
        b.extend_from_slice(&0u64.to_be_bytes());
        b.extend_from_slice(&(1u64 << 20).to_be_bytes());
        b.extend_from_slice(b"1snap");
        let (s, len) = parse(&b, 1).unwrap();
        assert_eq!(s[0].id, "1");
        assert_eq!(s[0].name, "snap");
        assert_eq!(s[0].l1_size, 2);
        assert_eq!(s[0].disk_size, Some(1 << 20));
        assert_eq!(len, 64);
        assert!(parse(&b[..50], 1).is_err());
    }
}
