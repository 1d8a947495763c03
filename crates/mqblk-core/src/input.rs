//! Reading a file a user points at (a certificate, a table, a plot's
//! input): each kind has a size cap, and at most one byte past it is read,
//! so that `/dev/zero` or a runaway log is refused at once instead of
//! filling memory. Here, below every crate, so that drivers and exports
//! read their files the same way; `mqblk::input` re-exports it with the
//! caps of the command line's files.

use std::io::Read as _;
use std::path::{Path, PathBuf};

/// A file that could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// It could not be opened or read.
    #[error("cannot read the {what} {}: {source}", path.display())]
    Io {
        /// What the file is for (`plot input`, `dm table`, ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It holds more than the cap.
    #[error(
        "the {what} {} is larger than {cap_bytes} bytes, the most mqblk reads of a {what} \
         (is it the right file?)",
        path.display()
    )]
    TooLarge {
        /// What the file is for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cap it broke, in bytes.
        cap_bytes: u64,
    },
    /// It is not UTF-8 text.
    #[error("the {what} {} is not UTF-8 text", path.display())]
    NotText {
        /// What the file is for.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
}

/// The bytes of `path` (a `what`: "plot input", ...), refused if there are
/// more than `cap_bytes`: at most `cap_bytes + 1` are read.
pub fn read_capped(path: &Path, what: &'static str, cap_bytes: u64) -> Result<Vec<u8>, InputError> {
    let io = |source| InputError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(cap_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > cap_bytes {
        return Err(InputError::TooLarge {
            what,
            path: path.to_path_buf(),
            cap_bytes,
        });
    }
    Ok(bytes)
}

/// [`read_capped`], as text.
pub fn read_text_capped(
    path: &Path,
    what: &'static str,
    cap_bytes: u64,
) -> Result<String, InputError> {
    String::from_utf8(read_capped(path, what, cap_bytes)?).map_err(|_| InputError::NotText {
        what,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // opens /dev/zero
    fn dev_zero_is_refused_at_the_cap_naming_the_file_and_the_cap() {
        let e = read_capped(Path::new("/dev/zero"), "plot input", 4096).unwrap_err();
        assert!(
            matches!(&e, InputError::TooLarge { cap_bytes: 4096, path, .. } if path == Path::new("/dev/zero")),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "the plot input /dev/zero is larger than 4096 bytes, the most mqblk reads of a plot input (is it the right file?)"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // makes a directory and a file
    fn a_file_of_exactly_the_cap_is_read_whole() {
        let dir = std::env::temp_dir().join(format!("mqblk-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, vec![b'a'; 100]).unwrap();
        assert_eq!(read_text_capped(&p, "x", 100).unwrap().len(), 100);
        assert!(matches!(
            read_capped(&p, "x", 99),
            Err(InputError::TooLarge { cap_bytes: 99, .. })
        ));
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_text_capped(&p, "x", 100),
            Err(InputError::NotText { .. })
        ));
        let e = read_capped(&dir.join("missing"), "x", 1).unwrap_err();
        assert!(e.to_string().starts_with("cannot read the x "), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
