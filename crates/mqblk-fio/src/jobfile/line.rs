//! One line of a job file, before it is read as a key: its comment cut,
//! and fio's `${VAR}` and `$keyword` substitutions made.

/// Cut a comment: the whole line after a leading `;`/`#`, or the rest of
/// the line after a `;`/`#` that follows whitespace (so that `#` inside a
/// value such as a URL survives).
pub(super) fn strip_comment(line: &str) -> &str {
    let trimmed = line.trim_start();
    if trimmed.starts_with(';') || trimmed.starts_with('#') {
        return "";
    }
    // In an inline device-mapper table, `;` separates the table's lines.
    let table = line.find("dm-table:").unwrap_or(usize::MAX);
    let mut prev_space = false;
    for (i, c) in line.char_indices() {
        if prev_space && (c == '#' || (c == ';' && i < table)) {
            return &line[..i];
        }
        prev_space = c.is_whitespace();
    }
    line
}

/// A line with fio's substitutions made: `${VAR}` becomes the
/// environment variable VAR (empty when unset, as fio does), and a keyword
/// (`$ncpus`) its value.
pub(super) fn substitute(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('$') {
        return line.into();
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        match rest[at + 2..].find('}') {
            Some(end) if end > 0 => {
                let name = &rest[at + 2..at + 2 + end];
                out.push_str(&std::env::var(name).unwrap_or_default());
                rest = &rest[at + 3 + end..];
            }
            _ => {
                out.push_str("${");
                rest = &rest[at + 2..];
            }
        }
    }
    out.push_str(rest);
    for (word, value) in KEYWORDS {
        if out.contains(word) {
            out = out.replace(word, &value().to_string());
        }
    }
    out.into()
}

/// fio's keywords in a job file's values, each with the host query that
/// gives its value on this machine. A value is asked for only when a line
/// uses its keyword.
const KEYWORDS: [(&str, HostQuery); 3] = [
    ("$pagesize", page_size),
    ("$mb_memory", mb_memory),
    ("$ncpus", ncpus),
];

/// How a keyword's value is found on this machine.
type HostQuery = fn() -> u64;

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).unwrap_or(0).max(4096)
}

fn mb_memory() -> u64 {
    // SAFETY: as above.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    (u64::try_from(pages).unwrap_or(0) * page_size()) >> 20
}

fn ncpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}
