//! Opening a device by its spec: an open error names the spec it came
//! from. The engine opens its jobs' devices with it; the command's other
//! subcommands (`info`, `serve`) say it the same way.

/// A device-open error, with the spec it came from unless it already
/// names it (a spec error quotes the spec itself).
pub fn open_error(e: mqblk::Error, spec: &str) -> anyhow::Error {
    match e {
        e @ mqblk::Error::Spec { .. } => anyhow::Error::new(e),
        e => anyhow::Error::new(e).context(format!("device {spec:?}")),
    }
}
