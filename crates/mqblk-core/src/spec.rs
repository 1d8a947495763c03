//! Device spec strings (control plane): `null,size=1T,completion=inline`,
//! `ram,size=1G`, `file:/path,direct=1`, `nbd://host:port/export`.
//!
//! A spec is a driver kind, an optional target (after `:` for files, or the
//! whole URL for network kinds), and `key=value` options. Options are taken
//! one by one by the core and the driver; any left over is an error that
//! names it, so a typo never passes silently.

use crate::error::{Error, Result};

/// A parsed spec.
#[derive(Debug, Clone)]
pub struct DeviceSpec {
    /// Driver kind: `null`, `ram`, `file`, `nbd`, ...
    pub kind: String,
    /// Target of the driver (a path or a URL), if any.
    pub target: Option<String>,
    /// The options, to be taken by the core and the driver.
    pub options: SpecOptions,
}

/// Options of a spec, consumed key by key.
///
/// Every key a parser asks for is remembered, taken or not, so that
/// [`SpecOptions::finish`] can list the valid keys of this device kind and
/// suggest the nearest one for a typo.
#[derive(Debug, Clone, Default)]
pub struct SpecOptions {
    spec: String,
    entries: Vec<(String, String)>,
    asked: Vec<String>,
}

const MAX_SPEC_LEN: usize = 4096;

/// Parse a spec string.
pub fn parse(spec: &str) -> Result<DeviceSpec> {
    let bad = |reason: &str| Error::spec(spec, reason);
    if spec.len() > MAX_SPEC_LEN {
        return Err(bad("longer than 4096 bytes"));
    }
    let spec_t = spec.trim();
    if spec_t.is_empty() {
        return Err(bad(
            "empty; expected a driver kind such as `null` or `ram,size=1G`",
        ));
    }
    if looks_like_path(spec_t) {
        return Err(bad(&format!(
            "a bare path; a file or block device is named `file:{spec_t}`"
        )));
    }
    // An inline device-mapper table holds lower specs, commas and all: the
    // whole rest is its target, and it takes no options of its own.
    if let Some(table) = spec_t.strip_prefix("dm-table:") {
        if table.trim().is_empty() {
            return Err(bad("empty table after `dm-table:`; expected lines such as `0 2048 linear ram,size=1M 0`, separated by `;`"));
        }
        return Ok(DeviceSpec {
            kind: "dm-table".to_string(),
            target: Some(table.to_string()),
            options: SpecOptions::parse(spec, None)?,
        });
    }
    // URL-shaped specs (nbd://, nbd+unix://) keep their query for the driver.
    if let Some((scheme, _)) = spec_t.split_once("://") {
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
        {
            return Err(bad("URL scheme must be letters, digits or `+`"));
        }
        let kind = scheme
            .split('+')
            .next()
            .unwrap_or(scheme)
            .to_ascii_lowercase();
        let (url, opts) = match spec_t.split_once(',') {
            Some((u, o)) => (u, Some(o)),
            None => (spec_t, None),
        };
        let options = SpecOptions::parse(spec, opts)?;
        return Ok(DeviceSpec {
            kind,
            target: Some(url.to_string()),
            options,
        });
    }
    let (head, opts) = match spec_t.split_once(',') {
        Some((h, o)) => (h, Some(o)),
        None => (spec_t, None),
    };
    let (kind, target) = match head.split_once(':') {
        Some((k, t)) => {
            if t.is_empty() {
                return Err(bad("empty target after `:`"));
            }
            (k, Some(t.to_string()))
        }
        None => (head, None),
    };
    if kind.is_empty()
        || !kind
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(bad(&format!(
            "driver kind `{kind}` must be letters, digits, `_` or `-`; expected null, ram, \
             file:PATH or nbd://HOST:PORT/EXPORT"
        )));
    }
    Ok(DeviceSpec {
        kind: kind.to_ascii_lowercase(),
        target,
        options: SpecOptions::parse(spec, opts)?,
    })
}

impl SpecOptions {
    /// Parse the options after the first comma (`None`: no comma).
    fn parse(spec: &str, opts: Option<&str>) -> Result<SpecOptions> {
        let mut entries: Vec<(String, String)> = Vec::new();
        let Some(opts) = opts else {
            return Ok(SpecOptions::empty(spec));
        };
        for (i, part) in opts.split(',').enumerate() {
            let part = part.trim();
            if part.is_empty() {
                return Err(Error::spec(
                    spec,
                    format!(
                        "option {} is empty (two commas in a row, or a comma at the end); \
                         expected key=value between commas",
                        i + 1
                    ),
                ));
            }
            let (k, v) = match part.split_once('=') {
                Some((k, v)) => (k.trim(), v.trim()),
                // A bare key is a boolean switch, as in fio job files.
                None => (part, "1"),
            };
            if k.is_empty() {
                return Err(Error::spec(spec, format!("option `{part}` has no name")));
            }
            if entries.iter().any(|(e, _)| e == k) {
                return Err(Error::spec(spec, format!("option `{k}` given twice")));
            }
            entries.push((k.to_string(), v.to_string()));
        }
        Ok(SpecOptions {
            spec: spec.to_string(),
            entries,
            asked: Vec::new(),
        })
    }

    /// An empty option set for `spec` (for building devices in code).
    pub fn empty(spec: &str) -> SpecOptions {
        SpecOptions {
            spec: spec.to_string(),
            entries: Vec::new(),
            asked: Vec::new(),
        }
    }

    /// Whether option `key` was given (and not yet taken).
    pub fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Add or replace an option (the bench's `--hw-queues` and friends).
    pub fn set(&mut self, key: &str, value: &str) {
        self.entries.retain(|(k, _)| k != key);
        self.entries.push((key.to_string(), value.to_string()));
    }

    /// The whole spec, for error messages.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// An error about option `key`.
    pub fn error(&self, key: &str, value: &str, expected: &str) -> Error {
        Error::spec(
            &self.spec,
            format!("option {key}={value:?}: expected {expected}"),
        )
    }

    /// Take a string option.
    pub fn take_str(&mut self, key: &str) -> Option<String> {
        if !self.asked.iter().any(|k| k == key) {
            self.asked.push(key.to_string());
        }
        let pos = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(pos).1)
    }

    /// Take a plain unsigned integer.
    pub fn take_u64(&mut self, key: &str) -> Result<Option<u64>> {
        match self.take_str(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| self.error(key, &v, "an unsigned integer")),
        }
    }

    /// Take a size with an optional binary suffix (`4k`, `1M`, `1T`, `1GiB`).
    pub fn take_size(&mut self, key: &str) -> Result<Option<u64>> {
        match self.take_str(key) {
            None => Ok(None),
            Some(v) => parse_size(&v)
                .map(Some)
                .map_err(|why| self.error(key, &v, &format!("a size such as 4k or 1G ({why})"))),
        }
    }

    /// Take a boolean: `1`/`0`, `true`/`false`, `on`/`off`, `yes`/`no`.
    pub fn take_bool(&mut self, key: &str) -> Result<Option<bool>> {
        match self.take_str(key) {
            None => Ok(None),
            Some(v) => parse_bool(&v)
                .map(Some)
                .ok_or_else(|| self.error(key, &v, "0 or 1 (or on/off, true/false)")),
        }
    }

    /// Take a floating-point number.
    pub fn take_f64(&mut self, key: &str) -> Result<Option<f64>> {
        match self.take_str(key) {
            None => Ok(None),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(self.error(key, &v, "a number")),
            },
        }
    }

    /// The error for a required option that was not given: if an unknown
    /// option looks like a typo of it (`sise` for `size`), the error says
    /// that instead. `example` shows the option in use (`ram,size=1G`).
    pub fn required(&self, key: &str, example: &str) -> Error {
        let typo = self
            .entries
            .iter()
            .find(|(k, _)| k != key && is_near(k, key));
        match typo {
            Some((k, _)) => Error::spec(
                &self.spec,
                format!("unknown option `{k}`; did you mean `{key}`? (`{key}` is required, as in `{example}`)"),
            ),
            None => Error::spec(
                &self.spec,
                format!("option `{key}` is required, as in `{example}`"),
            ),
        }
    }

    /// Fail if any option was not taken, naming it, the nearest valid key
    /// ("did you mean"), and every key the parsers asked for.
    pub fn finish(self) -> Result<()> {
        let Some((k, _)) = self.entries.first() else {
            return Ok(());
        };
        let mut reason = format!("unknown option `{k}` for this device kind");
        if let Some(near) = nearest(k, self.asked.iter().map(String::as_str)) {
            reason.push_str(&format!("; did you mean `{near}`?"));
        }
        if !self.asked.is_empty() {
            let mut valid: Vec<&str> = self.asked.iter().map(String::as_str).collect();
            valid.sort_unstable();
            reason.push_str(&format!(" Valid options: {}", valid.join(", ")));
        }
        Err(Error::spec(&self.spec, reason))
    }
}

/// Whether spec `s` reads as a path rather than a driver kind: its head
/// (before the first comma) is `/dev/sdb`, `./disk.img`, `~/x`, or has a
/// `/` and no `:` (`images/disk.img`), so it cannot be `kind:target` or
/// a URL.
pub fn looks_like_path(s: &str) -> bool {
    let head = s.split(',').next().unwrap_or(s);
    head.starts_with('/')
        || head.starts_with("./")
        || head.starts_with("../")
        || head.starts_with("~/")
        || (head.contains('/') && !head.contains(':'))
}

/// Edit distance with adjacent transpositions (optimal string alignment).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// Whether `typo` is close enough to `key` to suggest it: a small edit
/// distance for its length, or the same words in another spelling
/// (`queue-depth` for `queue_depth`).
fn is_near(typo: &str, key: &str) -> bool {
    let t = typo.to_ascii_lowercase().replace('-', "_");
    if t == key {
        return true;
    }
    let allowed = (key.len() / 3).max(1);
    edit_distance(&t, key) <= allowed
}

/// The candidate nearest to `typo`, if any is near enough.
pub fn nearest<'a>(typo: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let t = typo.to_ascii_lowercase().replace('-', "_");
    candidates
        .into_iter()
        .filter(|c| is_near(typo, c))
        .min_by_key(|c| edit_distance(&t, c))
}

/// Parse `on/off`-style booleans.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// Parse a size as fio does: binary suffixes `k`, `m`, `g`, `t`, `p`
/// (optionally followed by `b` or `ib`), case-insensitive; no suffix means
/// bytes.
pub fn parse_size(v: &str) -> std::result::Result<u64, String> {
    let s = v.trim();
    if s.is_empty() {
        return Err("empty".into());
    }
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits_end == 0 {
        return Err("must start with a number".into());
    }
    let n: u64 = s[..digits_end]
        .parse()
        .map_err(|_| "number too large".to_string())?;
    let suffix = s[digits_end..].to_ascii_lowercase();
    let shift = match suffix.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => return Err(format!("unknown suffix `{suffix}`")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| "size overflows 64 bits".to_string())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn kinds_targets_and_options() {
        let s = parse("null,size=1T,completion=inline").unwrap();
        assert_eq!(s.kind, "null");
        assert!(s.target.is_none());
        let mut o = s.options;
        assert_eq!(o.take_size("size").unwrap(), Some(1 << 40));
        assert_eq!(o.take_str("completion").as_deref(), Some("inline"));
        o.finish().unwrap();

        let s = parse("file:/tmp/x,direct=1").unwrap();
        assert_eq!(s.kind, "file");
        assert_eq!(s.target.as_deref(), Some("/tmp/x"));

        let s = parse("nbd+unix:///export?socket=/tmp/s,conns=4").unwrap();
        assert_eq!(s.kind, "nbd");
        assert_eq!(
            s.target.as_deref(),
            Some("nbd+unix:///export?socket=/tmp/s")
        );
    }

    #[test]
    fn malformed_specs_are_typed_errors() {
        for bad in ["", ",", "nu ll", "file:", "null,=3", "null,a=1,a=2", "://x"] {
            assert!(matches!(parse(bad), Err(Error::Spec { .. })), "{bad:?}");
        }
        let mut o = parse("null,size=12q").unwrap().options;
        let e = o.take_size("size").unwrap_err().to_string();
        assert!(e.contains("size=\"12q\""), "{e}");
        let o = parse("null,sise=1G").unwrap().options;
        let e = o.finish().unwrap_err().to_string();
        assert!(e.contains("unknown option `sise`"), "{e}");
    }

    #[test]
    fn empty_options_are_refused() {
        for bad in [
            "null,,,",
            "null,",
            "null,size=1G,,hw_queues=2",
            "ram,size=1G,",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("is empty"), "{bad:?}: {e}");
        }
        parse("null").unwrap();
    }

    #[test]
    fn unknown_keys_list_the_valid_ones_and_the_nearest() {
        let o = parse("ram,sise=1G").unwrap().options;
        let e = o.required("size", "ram,size=1G").to_string();
        assert!(
            e.contains("unknown option `sise`; did you mean `size`?"),
            "{e}"
        );
        let mut o = parse("ram,size=1G,queue-depth=4").unwrap().options;
        let _ = o.take_size("size");
        let _ = o.take_u64("block_size");
        let _ = o.take_u64("queue_depth");
        let _ = o.take_u64("hw_queues");
        let e = o.finish().unwrap_err().to_string();
        assert!(e.contains("unknown option `queue-depth`"), "{e}");
        assert!(e.contains("did you mean `queue_depth`?"), "{e}");
        assert!(
            e.contains("Valid options: block_size, hw_queues, queue_depth, size"),
            "{e}"
        );
        let mut o = parse("null,zzz=1").unwrap().options;
        let _ = o.take_u64("size");
        let e = o.finish().unwrap_err().to_string();
        assert!(!e.contains("did you mean"), "{e}");
        assert!(e.contains("Valid options: size"), "{e}");
        let o = parse("ram").unwrap().options;
        let e = o.required("size", "ram,size=1G").to_string();
        assert!(
            e.contains("option `size` is required, as in `ram,size=1G`"),
            "{e}"
        );
    }

    #[test]
    fn bare_paths_are_named_as_such() {
        for p in ["/dev/sdb", "./disk.img", "/tmp/x,direct=0", "images/a.img"] {
            let e = parse(p).unwrap_err().to_string();
            assert!(e.contains("a bare path"), "{p}: {e}");
            assert!(e.contains("file:"), "{p}: {e}");
        }
    }

    #[test]
    fn paths_and_kinds_are_told_apart() {
        assert!(looks_like_path("/dev/sdb,direct=1"));
        assert!(looks_like_path("images/a.img"));
        assert!(!looks_like_path("file:images/a.img"));
        assert!(!looks_like_path("nbd+unix:///x?socket=/tmp/s"));
        assert!(!looks_like_path("null,size=1G"));
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("sise", "size"), 1);
        assert_eq!(edit_distance("szie", "size"), 1);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(
            nearest("blocksize", ["block_size", "size"]),
            Some("block_size")
        );
        assert_eq!(nearest("qd", ["queue_depth", "size"]), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("k").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("16777216T").is_err());
    }
}
