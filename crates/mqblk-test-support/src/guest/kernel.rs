//! The guest's kernel: the real `linux-image-<abi>-amd64` that Debian's
//! `linux-image-amd64` depends on, fetched with `apt-get download`,
//! unpacked with `dpkg-deb -x`, and given the `modules.dep` that the
//! package leaves to `depmod` (run here with `-b`). It is unpacked once
//! into a cache under the temp dir that later tests and runs reuse: each
//! process unpacks into a directory of its own and renames it into place,
//! so two test binaries that ask at once both end with a whole tree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::child::{run_ok_within, Watched};
use crate::machine::require_tool;

/// The metapackage whose dependency names the kernel to fetch.
const METAPACKAGE: &str = "linux-image-amd64";

/// The longest an apt or dpkg step may take (a 70 MB download on a
/// loaded machine, or unpacking 400 MB of modules).
const STEP_MAX: Duration = Duration::from_secs(300);

/// An unpacked kernel: its image and its modules.
pub(super) struct Kernel {
    /// Its release (`uname -r`), e.g. `6.1.0-56-amd64`.
    pub release: String,
    /// `boot/vmlinuz-<release>`.
    pub vmlinuz: PathBuf,
    /// `lib/modules/<release>`, with `modules.dep` and `modules.builtin`.
    modules: PathBuf,
}

impl Kernel {
    /// Debian's kernel, from the cache or fetched into it; once per
    /// process.
    pub fn debian() -> &'static Kernel {
        static KERNEL: OnceLock<Kernel> = OnceLock::new();
        KERNEL.get_or_init(fetch)
    }

    /// The kernel unpacked at `tree`.
    fn at(tree: &Path) -> Kernel {
        let release = only_release(tree);
        let vmlinuz = tree.join("boot").join(format!("vmlinuz-{release}"));
        assert!(vmlinuz.is_file(), "no kernel image {}", vmlinuz.display());
        Kernel {
            modules: tree.join("lib/modules").join(&release),
            release,
            vmlinuz,
        }
    }

    /// The module files that give the kernel `wanted` (module names, `-`
    /// and `_` alike), each after the modules it depends on (from
    /// `modules.dep`), each once. A module built into the kernel needs no
    /// file and is left out; one that is neither fails the test.
    pub fn modules_for(&self, wanted: &[&str]) -> Vec<PathBuf> {
        let deps = self.read_list("modules.dep");
        let builtin: BTreeSet<String> = self
            .read_list("modules.builtin")
            .into_keys()
            .map(|p| module_name(&p))
            .collect();
        let by_name: BTreeMap<String, &String> = deps.keys().map(|p| (module_name(p), p)).collect();
        let mut order = Vec::new();
        let mut seen = BTreeSet::new();
        for name in wanted {
            let name = name.replace('-', "_");
            if builtin.contains(&name) {
                continue;
            }
            let Some(path) = by_name.get(&name) else {
                panic!(
                    "kernel {} has no module {name} (in {}), and it is not built in",
                    self.release,
                    self.modules.join("modules.dep").display()
                );
            };
            self.visit(path, &deps, &mut seen, &mut order);
        }
        order.into_iter().map(|p| self.modules.join(p)).collect()
    }

    /// Add `path` to `order` after what it depends on.
    fn visit(
        &self,
        path: &str,
        deps: &BTreeMap<String, Vec<String>>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) {
        if !seen.insert(path.to_string()) {
            return;
        }
        let Some(needs) = deps.get(path) else {
            panic!(
                "kernel {}: modules.dep names {path} but has no line for it",
                self.release
            );
        };
        for d in needs {
            self.visit(d, deps, seen, order);
        }
        order.push(path.to_string());
    }

    /// A `modules.*` list: each line's module path, and the paths after
    /// its colon (none for `modules.builtin`).
    fn read_list(&self, name: &str) -> BTreeMap<String, Vec<String>> {
        let path = self.modules.join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let (module, needs) = l.split_once(':').unwrap_or((l, ""));
                let needs = needs.split_whitespace().map(str::to_string).collect();
                (module.trim().to_string(), needs)
            })
            .collect()
    }
}

/// A module's name from its path: `kernel/fs/ext4/ext4.ko` is `ext4`,
/// `crc32c-intel.ko.xz` is `crc32c_intel`.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split_once(".ko").map_or(file, |(s, _)| s);
    stem.replace('-', "_")
}

/// The kernel package, from the cache under the temp dir, fetched and
/// unpacked into it first if it is not there.
fn fetch() -> Kernel {
    for tool in ["apt-cache", "apt-get", "dpkg-deb", "depmod"] {
        require_tool(tool);
    }
    let package = image_package();
    let cache = std::env::temp_dir().join("mqblk-guest-kernel");
    let tree = cache.join(&package);
    if !tree.exists() {
        unpack(&package, &cache, &tree);
    }
    Kernel::at(&tree)
}

/// The real kernel package that the metapackage depends on today.
fn image_package() -> String {
    let out = run_ok_within(
        Command::new("apt-cache").args(["depends", METAPACKAGE]),
        STEP_MAX,
    );
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-") && p.ends_with("-amd64"))
        .map(str::to_string)
        .unwrap_or_else(|| {
            panic!(
                "`apt-cache depends {METAPACKAGE}` names no linux-image-*-amd64 \
                 (has apt-get update run?):\n{out}"
            )
        })
}

/// Download `package` and unpack it into `tree`, through a staging
/// directory of this process's own.
fn unpack(package: &str, cache: &Path, tree: &Path) {
    remove_dead_staging(package, cache);
    let staging = cache.join(format!(".{package}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)
        .unwrap_or_else(|e| panic!("create {}: {e}", staging.display()));
    eprintln!("guest: fetching {package} into {}", cache.display());
    download(package, &staging);
    let deb = std::fs::read_dir(&staging)
        .expect("list the staging directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .unwrap_or_else(|| panic!("apt-get download {package} left no .deb"));
    let root = staging.join("root");
    run_ok_within(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root),
        STEP_MAX,
    );
    let _ = std::fs::remove_file(&deb);
    let release = only_release(&root);
    run_ok_within(
        Command::new("depmod").arg("-b").arg(&root).arg(&release),
        STEP_MAX,
    );
    // The first process to rename wins; a later one finds the tree there.
    if let Err(e) = std::fs::rename(&root, tree) {
        assert!(
            tree.exists(),
            "rename {} to {}: {e}",
            root.display(),
            tree.display()
        );
    }
    let _ = std::fs::remove_dir_all(&staging);
}

/// Remove the staging directories that processes which died mid-fetch
/// left (`.<package>.<pid>`, its pid no longer running).
fn remove_dead_staging(package: &str, cache: &Path) {
    let prefix = format!(".{package}.");
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&prefix) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `apt-get download` into `dir`; once more after `apt-get update` if the
/// lists named a version that the archive no longer has.
fn download(package: &str, dir: &Path) {
    let mut get = Command::new("apt-get");
    get.args(["download", "-q", package]).current_dir(dir);
    let (status, _, err) = Watched::spawn(&mut get).finish(STEP_MAX);
    if status.success() {
        return;
    }
    eprintln!(
        "guest: apt-get download {package} failed ({}); apt-get update, once",
        err.trim()
    );
    run_ok_within(Command::new("apt-get").args(["update", "-qq"]), STEP_MAX);
    run_ok_within(&mut get, STEP_MAX);
}

/// The one release under `root/lib/modules`.
fn only_release(root: &Path) -> String {
    let dir = root.join("lib/modules");
    let releases: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the kernel package has no {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    match releases.as_slice() {
        [one] => one.clone(),
        _ => panic!("expected one release in {}: {releases:?}", dir.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::module_name;

    #[test]
    fn module_names_drop_the_directory_and_the_suffix_and_use_underscores() {
        assert_eq!(module_name("kernel/fs/ext4/ext4.ko"), "ext4");
        assert_eq!(
            module_name("kernel/arch/x86/crypto/crc32c-intel.ko.xz"),
            "crc32c_intel"
        );
        assert_eq!(module_name("virtio_pci.ko.zst"), "virtio_pci");
    }
}
