//! The ram device's options (control plane): the part of a spec string
//! after `ram,`, parsed into typed fields (Linux brd's `rd_size` module
//! parameter, plus a logical block size).
//!
//! Options common to every device kind (`hw_queues`, `queue_depth`,
//! `queue_mode`, ...) are not parsed here: [`DeviceConfig::take_common`]
//! takes them. Whatever is left after both is an unknown option, and
//! [`SpecOptions::finish`] rejects it by name.
//!
//! [`DeviceConfig::take_common`]: mqblk_core::queue::DeviceConfig::take_common

use mqblk_core::error::Result;
use mqblk_core::spec::SpecOptions;

/// Default logical block size, as brd's (512).
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// Every ram-device option, typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RamConfig {
    /// Capacity in bytes (`size`, required, with a suffix such as `1G`). A
    /// non-zero multiple of `block_size`. Memory is only taken as data is
    /// written, so this can be far larger than the machine's memory.
    pub size_bytes: u64,
    /// Logical block size in bytes (`block_size`, 512 to 4096, a power of
    /// two; default 512).
    pub block_size: u32,
}

impl RamConfig {
    /// A configuration of `size_bytes` with the default block size.
    pub fn new(size_bytes: u64) -> RamConfig {
        RamConfig {
            size_bytes,
            block_size: DEFAULT_BLOCK_SIZE,
        }
    }

    /// Take the ram device's options out of `o`, validating each one.
    ///
    /// The common options and unknown keys are left in `o`: call
    /// [`mqblk_core::queue::DeviceConfig::take_common`] and then
    /// [`SpecOptions::finish`] (as [`crate::open`] does).
    pub fn from_options(o: &mut SpecOptions) -> Result<RamConfig> {
        let size_bytes = o
            .take_size("size")?
            .ok_or_else(|| o.required("size", "ram,size=1G"))?;
        let mut c = RamConfig::new(size_bytes);
        if let Some(bs) = o.take_size("block_size")? {
            if !(512..=4096).contains(&bs) || !bs.is_power_of_two() {
                return Err(o.error("block_size", &bs.to_string(), "512, 1k, 2k or 4k"));
            }
            c.block_size = bs as u32;
        }
        if c.size_bytes == 0 || !c.size_bytes.is_multiple_of(u64::from(c.block_size)) {
            let expected = format!(
                "a non-zero multiple of the block size of {} bytes",
                c.block_size
            );
            return Err(o.error("size", &c.size_bytes.to_string(), &expected));
        }
        Ok(c)
    }

    /// Check a configuration built in code; returns what is wrong.
    pub fn check(&self) -> std::result::Result<(), String> {
        let bs = self.block_size;
        if !(512..=4096).contains(&bs) || !bs.is_power_of_two() {
            return Err(format!("block_size {bs} must be 512, 1024, 2048 or 4096"));
        }
        if self.size_bytes == 0 || !self.size_bytes.is_multiple_of(u64::from(bs)) {
            return Err(format!(
                "size {} must be a non-zero multiple of the block size of {bs} bytes",
                self.size_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use mqblk_core::error::Error;
    use mqblk_core::spec;

    use super::*;

    fn parse(s: &str) -> Result<RamConfig> {
        let mut o = spec::parse(s).expect("spec parses").options;
        let c = RamConfig::from_options(&mut o)?;
        o.finish()?;
        Ok(c)
    }

    #[test]
    fn size_and_block_size() {
        let c = parse("ram,size=1G").unwrap();
        assert_eq!(c, RamConfig::new(1 << 30));
        assert_eq!(c.block_size, 512);
        assert!(c.check().is_ok());
        let c = parse("ram,size=1T,block_size=4k").unwrap();
        assert_eq!((c.size_bytes, c.block_size), (1 << 40, 4096));
        for bs in ["512", "1k", "2048", "4096"] {
            parse(&format!("ram,size=1M,block_size={bs}")).unwrap();
        }
    }

    #[test]
    fn bad_values_name_the_key() {
        for (s, key) in [
            ("ram", "size"),
            ("ram,block_size=4k", "size"),
            ("ram,size=12q", "size"),
            ("ram,size=0", "size"),
            ("ram,size=1000", "size"),
            ("ram,size=6k,block_size=4k", "size"),
            ("ram,size=1M,block_size=256", "block_size"),
            ("ram,size=1M,block_size=8k", "block_size"),
            ("ram,size=1M,block_size=1536", "block_size"),
            ("ram,size=1M,block_size=big", "block_size"),
        ] {
            match parse(s) {
                Err(e @ Error::Spec { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.contains(key), "{s}: {msg}");
                }
                other => panic!("{s}: expected a spec error naming {key}, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_typo_of_size_is_named_as_a_typo() {
        let e = parse("ram,sise=1G").unwrap_err().to_string();
        assert!(
            e.contains("unknown option `sise`; did you mean `size`?"),
            "{e}"
        );
    }

    #[test]
    fn unknown_and_common_keys_are_left_for_the_caller() {
        let mut o = spec::parse("ram,size=1G,queue_depth=8,sise=2G")
            .unwrap()
            .options;
        RamConfig::from_options(&mut o).unwrap();
        assert_eq!(o.take_u64("queue_depth").unwrap(), Some(8));
        let e = o.finish().unwrap_err();
        assert!(e.to_string().contains("unknown option `sise`"), "{e}");
    }

    #[test]
    fn check_rejects_what_parsing_rejects() {
        assert!(RamConfig::new(0).check().is_err());
        assert!(RamConfig::new(1000).check().is_err());
        let c = RamConfig {
            size_bytes: 1 << 20,
            block_size: 3000,
        };
        assert!(c.check().is_err());
    }
}
