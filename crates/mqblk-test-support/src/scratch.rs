//! A scratch directory for one test, removed with what is in it.

/// A fresh directory under the system's temp dir for one test, named after
/// the test's tag and this process, and removed (with what is in it) when
/// dropped.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    /// Make (or empty) `mqblk-TAG-PID` in the temp dir.
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("mqblk-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// A sparse file `name` of `len` bytes in it.
    pub fn file(&self, name: &str, len: u64) -> std::path::PathBuf {
        let p = self.0.join(name);
        std::fs::File::create(&p)
            .and_then(|f| f.set_len(len))
            .expect("create a scratch file");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
