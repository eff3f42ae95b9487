//! The one place tests find their fixtures, so that `scripts/test.sh` passes on a clone with nothing
//! beside it:
//!
//! - the real Ingero trace databases and their `FACTS.json`, carried in `testdata/ingero-dbs/`
//!   (see `testdata/ingero-dbs/NOTICE.md` for where they come from and their license);
//! - the mock CUDA libraries and workloads, built once per test process by `make -C mock-cuda`.
//!
//! `CAUSEWAY_INGERO_DBS` points the Ingero fixtures at another directory (newer Ingero DBs, say);
//! nothing else is read from the environment.

use std::path::{Path, PathBuf};
use std::sync::Once;

/// The Ingero databases in `testdata/ingero-dbs`, each described in its `FACTS.json`. They are in
/// WAL mode: open them `immutable=1` (or copy them) so that no test writes beside them.
pub const INGERO_DBS: &[&str] = &[
    "pytorch-dataloader-starvation.db",
    "sample-cluster.db",
    "sample-gpu-node-01.db",
    "sample-gpu-node-02.db",
    "sample-gpu-node-03.db",
];

/// The root of the repository (the workspace).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testdata/ sits in the workspace root").to_path_buf()
}

/// The directory holding the Ingero DBs and `FACTS.json`.
///
/// # Panics
/// When the directory lacks `FACTS.json`: a test that cannot find its fixture fails loudly.
pub fn ingero_dbs() -> PathBuf {
    let dir = std::env::var_os("CAUSEWAY_INGERO_DBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("testdata/ingero-dbs"));
    assert!(
        dir.join("FACTS.json").is_file(),
        "FACTS.json not found in {} (the Ingero fixtures are carried in testdata/ingero-dbs; \
         CAUSEWAY_INGERO_DBS overrides the directory)",
        dir.display()
    );
    dir
}

/// One Ingero DB by file name, e.g. `ingero_db("sample-cluster.db")`.
pub fn ingero_db(name: &str) -> PathBuf {
    let path = ingero_dbs().join(name);
    assert!(path.is_file(), "no Ingero fixture {}", path.display());
    path
}

/// `FACTS.json` of the Ingero DBs, as text.
pub fn ingero_facts() -> String {
    let path = ingero_dbs().join("FACTS.json");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `mock-cuda/build`, built (`make -s -C mock-cuda`) once per test process.
///
/// # Panics
/// When the build fails: the live tests need the mock libraries.
pub fn mock_cuda_build() -> PathBuf {
    static BUILD: Once = Once::new();
    let dir = repo_root().join("mock-cuda");
    BUILD.call_once(|| {
        let status = std::process::Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(&dir)
            .status()
            .unwrap_or_else(|e| panic!("make -C {}: {e}", dir.display()));
        assert!(status.success(), "make -C {} failed", dir.display());
    });
    dir.join("build")
}
