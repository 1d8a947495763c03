//! Opening a device from the command line: a spec as given (a bare path
//! read as the file device), a read-only open, and an open error that
//! names its spec. `main` (info), `serve` and the bench engine share these.

/// A device spec as given, or `file:PATH` for a bare path (with a note):
/// a head that reads as a path, or that names an existing file and no
/// device kind (`disk.img`).
pub(crate) fn device_spec(arg: &str) -> String {
    let t = arg.trim();
    let head = t.split(',').next().unwrap_or(t);
    let kinds = ["null", "nullb", "ram", "file", "nbd"];
    let path = mqblk::spec::looks_like_path(t)
        || (!head.contains(':')
            && !kinds.contains(&head.to_ascii_lowercase().as_str())
            && std::path::Path::new(head).exists());
    if path {
        eprintln!("mqblk: note: reading the bare path {head} as the file device file:{head}");
        format!("file:{t}")
    } else {
        arg.to_string()
    }
}

pub(crate) use mqblk_bench::open::open_error;

/// Open `spec` read-only (`ro=1` unless the spec sets `ro=`): info and
/// read-only exports never ask for write access.
pub(crate) fn open_read_only(spec: &str) -> mqblk::Result<mqblk::Device> {
    let mut parsed = mqblk::spec::parse(spec)?;
    if !parsed.options.contains("ro") {
        parsed.options.set("ro", "1");
    }
    mqblk::open_parsed(parsed)
}
