//! The tables being opened one inside another (a `dm:` table whose legs
//! are `dm:` or `dm-table:` specs): a table that names itself, directly or
//! through other tables, is refused with the chain that closes the cycle,
//! and tables nest at most [`MAX_NESTING`] deep. The chain is a value
//! passed down with each open, so that opens on other threads do not see
//! it.

use std::path::PathBuf;

use mqblk_core::{Error, Result};

/// Most tables opened one inside another.
pub const MAX_NESTING: usize = 16;

/// Longest shown piece of an inline table in a chain.
const SHOWN_MAX: usize = 48;

/// One table of the chain.
#[derive(Clone, Debug)]
struct Link {
    /// As the chain shows it: the file as its spec names it, or the inline
    /// table's spec (shortened).
    shown: String,
    /// The file, canonical (`None`: inline, or a path that does not
    /// resolve, whose open fails on its own).
    file: Option<PathBuf>,
}

/// The tables being opened, outermost first. [`Nesting::default`] is the
/// start: no table open.
#[derive(Clone, Debug, Default)]
pub struct Nesting {
    links: Vec<Link>,
}

impl Nesting {
    /// Tables open around the one being opened.
    pub fn depth(&self) -> usize {
        self.links.len()
    }

    /// Enter `dm:PATH` (its spec `spec`): the chain its legs are opened
    /// in. Refused if the chain holds the same file, or is
    /// [`MAX_NESTING`] tables deep already.
    pub fn enter_file(&self, spec: &str, path: &str) -> Result<Nesting> {
        let file = std::fs::canonicalize(path).ok();
        let link = Link {
            shown: path.to_string(),
            file,
        };
        if let Some(at) = link
            .file
            .as_ref()
            .and_then(|f| self.links.iter().position(|l| l.file.as_ref() == Some(f)))
        {
            return Err(Error::spec(
                spec,
                format!(
                    "the dm table includes itself: {}; a table may not name itself as a device, \
                     directly or through other tables",
                    Nesting::shown(&self.links[at..], &link)
                ),
            ));
        }
        self.enter(spec, link)
    }

    /// Enter `dm-table:TABLE` (its spec `spec`).
    pub fn enter_inline(&self, spec: &str) -> Result<Nesting> {
        let shown = match spec.char_indices().nth(SHOWN_MAX) {
            Some((cut, _)) => format!("{}…", &spec[..cut]),
            None => spec.to_string(),
        };
        self.enter(spec, Link { shown, file: None })
    }

    fn enter(&self, spec: &str, link: Link) -> Result<Nesting> {
        if self.links.len() >= MAX_NESTING {
            return Err(Error::spec(
                spec,
                format!(
                    "dm tables nest {} deep, over the limit of {MAX_NESTING} \
                     (mqblk_dm::nesting::MAX_NESTING): {}",
                    self.links.len() + 1,
                    Nesting::shown(&self.links, &link)
                ),
            ));
        }
        let mut links = self.links.clone();
        links.push(link);
        Ok(Nesting { links })
    }

    /// `links` then `last`, as an error shows the chain: `a → b → c`.
    fn shown(links: &[Link], last: &Link) -> String {
        links
            .iter()
            .chain(std::iter::once(last))
            .map(|l| l.shown.as_str())
            .collect::<Vec<_>>()
            .join(" → ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_tables_nest_up_to_the_limit_and_no_further() {
        let mut n = Nesting::default();
        for _ in 0..MAX_NESTING {
            n = n.enter_inline("dm-table:0 8 zero").unwrap();
        }
        assert_eq!(n.depth(), MAX_NESTING);
        let e = n.enter_inline("dm-table:0 8 zero").unwrap_err().to_string();
        assert!(e.contains("nest 17 deep, over the limit of 16"), "{e}");
    }
}
