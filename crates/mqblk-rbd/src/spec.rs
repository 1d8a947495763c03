//! The `rbd:` spec (control plane): `rbd:POOL/IMAGE[@SNAP]` and the
//! driver's own options `conf=PATH`, `id=NAME`, `create=SIZE`,
//! `cache=on|off` and `handles=shared|queue`. Pure parsing: nothing here
//! needs librbd, so it is tested on every machine.

use mqblk_core::error::{Error, Result};
use mqblk_core::spec::SpecOptions;

/// Where the image is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbdTarget {
    /// Pool name.
    pub pool: String,
    /// Image name.
    pub image: String,
    /// Snapshot name: the device is read-only.
    pub snap: Option<String>,
}

/// How hardware queues reach the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Handles {
    /// One image handle for the device; each queue reaps its own
    /// completions, and hands another queue's to it.
    #[default]
    Shared,
    /// One image handle per hardware queue.
    PerQueue,
}

/// The driver's options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RbdOptions {
    /// ceph.conf to read (default: librados' search, `$CEPH_CONF`).
    pub conf: Option<String>,
    /// Client id (`admin` for `client.admin`).
    pub id: Option<String>,
    /// Create the image with this size if it does not exist.
    pub create_bytes: Option<u64>,
    /// Force librbd's cache on or off (default: the cluster's config).
    pub cache: Option<bool>,
    /// Image handles.
    pub handles: Handles,
}

/// Longest pool, image or snapshot name (librbd's `RBD_MAX_IMAGE_NAME_SIZE`
/// less the terminator, applied to all three).
pub const MAX_NAME_BYTES: usize = 95;

fn check_name(spec: &str, what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::spec(
            spec,
            format!("empty {what} name; expected rbd:POOL/IMAGE[@SNAP]"),
        ));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(Error::spec(
            spec,
            format!(
                "{what} name of {} bytes; the limit is {MAX_NAME_BYTES}",
                name.len()
            ),
        ));
    }
    if name.bytes().any(|b| b == 0 || b == b'/' || b == b'@') {
        return Err(Error::spec(
            spec,
            format!("{what} name `{name}` contains `/`, `@` or a NUL byte"),
        ));
    }
    Ok(())
}

/// Parse `POOL/IMAGE[@SNAP]`.
pub fn parse_target(spec: &str, target: &str) -> Result<RbdTarget> {
    let Some((pool, rest)) = target.split_once('/') else {
        return Err(Error::spec(
            spec,
            format!("`{target}` names no pool; expected rbd:POOL/IMAGE[@SNAP], as in rbd:rbd/img"),
        ));
    };
    let (image, snap) = match rest.split_once('@') {
        Some((i, s)) => (i, Some(s)),
        None => (rest, None),
    };
    check_name(spec, "pool", pool)?;
    check_name(spec, "image", image)?;
    if let Some(s) = snap {
        check_name(spec, "snapshot", s)?;
    }
    Ok(RbdTarget {
        pool: pool.to_string(),
        image: image.to_string(),
        snap: snap.map(str::to_string),
    })
}

/// Take the driver's options out of `o` (the common ones stay for the core).
pub fn take_options(o: &mut SpecOptions) -> Result<RbdOptions> {
    let conf = o.take_str("conf");
    if conf.as_deref().is_some_and(|c| c.contains('\0')) {
        return Err(o.error("conf", "…", "a path without NUL bytes"));
    }
    let id = o.take_str("id");
    if let Some(i) = &id {
        if i.is_empty() || i.contains('\0') || i.len() > MAX_NAME_BYTES {
            return Err(o.error("id", i, "a client id such as `admin`"));
        }
    }
    let create_bytes = o.take_size("create")?;
    if create_bytes == Some(0) {
        return Err(o.error("create", "0", "an image size such as 1G"));
    }
    let cache = o.take_bool("cache")?;
    let handles = match o.take_str("handles").as_deref() {
        None | Some("shared") => Handles::Shared,
        Some("queue") => Handles::PerQueue,
        Some(v) => return Err(o.error("handles", v, "`shared` or `queue`")),
    };
    Ok(RbdOptions {
        conf,
        id,
        create_bytes,
        cache,
        handles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = parse_target("s", "rbd/img").unwrap();
        assert_eq!(t.pool, "rbd");
        assert_eq!(t.image, "img");
        assert_eq!(t.snap, None);
        let t = parse_target("s", "p/i@s1").unwrap();
        assert_eq!(t.snap.as_deref(), Some("s1"));
        for bad in ["img", "/img", "rbd/", "rbd/img@", "a/b/c", "a/b@c@d"] {
            assert!(parse_target("s", bad).is_err(), "{bad}");
        }
        let long = format!("rbd/{}", "x".repeat(MAX_NAME_BYTES + 1));
        let e = parse_target("s", &long).unwrap_err().to_string();
        assert!(e.contains("limit is 95"), "{e}");
    }

    #[test]
    fn options() {
        let s = mqblk_core::spec::parse(
            "rbd:rbd/img,conf=/x/ceph.conf,id=admin,create=1G,cache=off,handles=queue",
        )
        .unwrap();
        let mut o = s.options;
        let r = take_options(&mut o).unwrap();
        assert_eq!(r.conf.as_deref(), Some("/x/ceph.conf"));
        assert_eq!(r.id.as_deref(), Some("admin"));
        assert_eq!(r.create_bytes, Some(1 << 30));
        assert_eq!(r.cache, Some(false));
        assert_eq!(r.handles, Handles::PerQueue);
        o.finish().unwrap();
        let mut o = mqblk_core::spec::parse("rbd:a/b,handles=many")
            .unwrap()
            .options;
        assert!(take_options(&mut o).is_err());
    }
}
