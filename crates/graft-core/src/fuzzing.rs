//! Replaying the fuzz targets' regression inputs (`fuzz/regressions/<target>/`,
//! see `fuzz/README.md`) from the test suites of the crates the targets test.
//! Not part of the API.

/// Runs `f` on every file in `fuzz/regressions/<target>/`, in name order;
/// returns how many there were. Panics if the directory cannot be read or
/// is empty (a replay that runs nothing would assert nothing).
pub fn replay_regressions(target: &str, f: fn(&[u8])) -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions").join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "{} holds no regression inputs", dir.display());
    for p in &paths {
        f(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())));
    }
    paths.len()
}
