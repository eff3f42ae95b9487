//! One always-on tracer per host: `trace --all` holds an exclusive lock (`flock`, through std's
//! `File::try_lock`) on a lock file for its whole run. The holder's pid and trace are written in
//! the file so a second tracer can say who holds it. The kernel drops the lock with the process,
//! so a tracer killed with SIGKILL never leaves a stale lock behind: a restart just takes it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// The held lock; released when dropped or when the process ends.
pub struct HostLock {
    _file: File,
}

/// Take the lock at `path` for a tracer writing `db`, or say who holds it.
pub fn acquire(path: &Path, db: &Path) -> anyhow::Result<HostLock> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("--lock {}: {e}", path.display()))?;
    }
    // not truncated on open: the holder's line must survive a refused open
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| anyhow::anyhow!("--lock {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            anyhow::bail!(
                "another `causeway trace --all` is running on this host ({}; lock {}): one always-on tracer per \
                 host. Stop it first, or give this one another --lock",
                holder.split_whitespace().collect::<Vec<_>>().join(" "),
                path.display()
            );
        }
        Err(TryLockError::Error(e)) => anyhow::bail!("--lock {}: {e}", path.display()),
    }
    let db = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf());
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "pid {} writing {}", std::process::id(), db.display())?;
    file.flush()?;
    Ok(HostLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_name_and_a_released_lock_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("sub/trace.lock");
        let first = acquire(&lock, Path::new("/var/lib/causeway/a.db")).unwrap();
        let err = acquire(&lock, Path::new("b.db")).err().expect("a second holder is refused").to_string();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        assert!(err.contains("/var/lib/causeway/a.db"), "{err}");
        drop(first);
        let again = acquire(&lock, Path::new("c.db"));
        assert!(again.is_ok(), "released: {:?}", again.err());
    }
}
