//! A tmpfs of a given size mounted on a directory of the test's own, to fill a disk tier.
//! Needs root (`mount`); where that is not permitted, [`Tmpfs::mount`] returns `None` and the
//! test skips with a message. It unmounts (lazily) when dropped.

use std::io::Write;

/// A tmpfs of a given size mounted on a directory; unmounted when dropped.
pub struct Tmpfs {
    path: std::path::PathBuf,
}

impl Tmpfs {
    /// Mount `bytes` of tmpfs at `path` (created), or `None` where mounting is not permitted.
    pub fn mount(path: &std::path::Path, bytes: u64) -> Option<Self> {
        std::fs::create_dir_all(path).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs {
            path: path.to_path_buf(),
        })
    }

    /// Fill every free byte with a filler file.
    pub fn fill(&self) {
        let mut f = std::fs::File::create(self.path.join("filler")).expect("filler");
        let chunk = vec![0xa5u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&[0u8; 1]).is_ok() {}
        let _ = f.sync_all();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}
