//! Waits on what a process a test started makes: the path of a server's
//! socket, bounded, and cut short when the server exits first.

/// Wait until `path` exists (a server's socket), failing the test with
/// `what` after 30 s, or at once if `child` (the server) has exited.
pub fn wait_for_path(
    path: &std::path::Path,
    what: &str,
    mut child: Option<&mut std::process::Child>,
) {
    let start = std::time::Instant::now();
    while !path.exists() {
        if let Some(c) = child.as_deref_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                panic!("{what}: exited ({st}) before {} appeared", path.display());
            }
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{what}: {} did not appear within 30 s",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
