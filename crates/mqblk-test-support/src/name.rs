//! The running test's name, which skips and time bounds are reported
//! under.

/// The running test's name (libtest names each test's thread after it).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed test thread>")
        .to_string()
}
