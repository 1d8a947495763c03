//! How a degraded mirror is shown, the same in `bench`, `stat`, `serve`
//! and `qos show`: the bench engine's words (`mqblk_bench::degraded`),
//! named here for the command's own modules.

pub(crate) use mqblk_bench::degraded::{json, text};
